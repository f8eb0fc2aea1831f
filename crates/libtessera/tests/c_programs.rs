//! The C programs of tests/c/ — docs/workgroups.md's example host among
//! them — compiled with `cc` against include/tessera.h and the built
//! libtessera.so, and run as root on a private broker state directory
//! (the machine reset afterwards): join, intervals and leave; a second
//! process joining the first's workgroup by name; another user's host
//! refused root's workgroup (through a daemon open to every user); the
//! refusals and their codes; the system calls of the interval calls,
//! counted with strace; and a C++ host built through pkg-config against
//! the library's soname, run by a user without privileges, best-effort.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tessera_testkit::{privileged, Reaped};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// This build's libtessera.so: beside the test binary in deps/ (where
/// `cargo test` leaves it), or in the profile directory (`cargo build`).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libtessera.so"))
        .find(|lib| lib.exists())
        .expect("libtessera.so is built with the tests")
}

/// A copy of this build's library in `dir`, under its name and its soname.
fn place_library(dir: &Path) {
    let lib = built_library();
    for name in ["libtessera.so", "libtessera.so.0"] {
        let _ = std::fs::remove_file(dir.join(name));
        std::fs::copy(&lib, dir.join(name)).unwrap();
    }
}

/// Compiles tests/c/`source` into `dir`, beside a copy of the library
/// under its soname.
fn compile(source: &str, dir: &Path) -> PathBuf {
    place_library(dir);
    let exe = dir.join(source.trim_end_matches(".c"));
    let out = Command::new("cc")
        .arg(Path::new(CRATE).join("tests/c").join(source))
        .arg(format!("-I{CRATE}/include"))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-Wall", "-Werror", "-ltessera", "-lpthread", "-o"])
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn start(exe: &Path, args: &[&str], run_dir: &Path) -> Child {
    Command::new(exe)
        .args(args)
        .env("TESSERA_RUN_DIR", run_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` at most `limit`, killing it past that.
fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn cycles_counted(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn a_host_joins_marks_its_cycles_and_a_second_process_joins_by_name() {
    let Some(machine) =
        privileged("a_host_joins_marks_its_cycles_and_a_second_process_joins_by_name")
    else {
        return;
    };
    let dir = machine.dir();
    let host = compile("host.c", &dir);
    // The first process creates the workgroup: its callback thread alone
    // (the second process's thread takes the other reservation).
    let mut first = start(&host, &["wg-c", "600", "0"], &dir);
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let opened = lines.next().unwrap().unwrap();
    assert!(opened.starts_with("guaranteed 1"), "{opened}");
    let second = finish(
        start(&host, &["wg-c", "200", "0"], &dir),
        Duration::from_secs(20),
    );
    assert!(second.status.success(), "the second process joined by name");
    assert_eq!(cycles_counted(&second.stdout), vec![200]);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let first = finish(first, Duration::from_secs(20));
    assert!(first.status.success());
    assert_eq!(cycles_counted(rest.join("\n").as_bytes()), vec![600]);
    // The creator's close destroyed it.
    let gone = machine.session().open_workgroup("wg-c", None).unwrap_err();
    assert_eq!(gone.code, tessera_broker::ErrorCode::NotFound, "{gone}");
}

#[test]
fn refusals_come_with_their_codes() {
    let Some(machine) = privileged("refusals_come_with_their_codes") else {
        return;
    };
    let dir = machine.dir();
    let refusals = compile("refusals.c", &dir);
    let out = finish(
        start(&refusals, &["wg-refusals"], &dir),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "every refusal had its code");
}

#[test]
fn the_docs_example_is_the_compiled_host() {
    let docs = std::fs::read_to_string(Path::new(CRATE).join("../../docs/workgroups.md")).unwrap();
    let host = std::fs::read_to_string(Path::new(CRATE).join("tests/c/host.c")).unwrap();
    assert!(
        docs.contains(&host),
        "docs/workgroups.md shows tests/c/host.c verbatim"
    );
}

/// The system calls `strace -c` counted in the main thread of `exe NAME n`.
fn main_thread_syscalls(exe: &Path, dir: &Path, n: u64) -> u64 {
    let summary = dir.join(format!("strace-{n}.txt"));
    let out = Command::new("strace")
        .args(["-c", "-o"])
        .arg(&summary)
        .arg(exe)
        .args(["wg-syscalls", &n.to_string()])
        .env("TESSERA_RUN_DIR", dir)
        .output()
        .expect("strace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&summary).unwrap();
    // "100.00    0.000123           1       123         3 total": calls
    // is the fourth column (errors may be blank).
    let total = text.lines().find(|l| l.trim_end().ends_with("total"));
    let calls = total.and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
    calls.unwrap_or_else(|| panic!("no total in strace's summary: {text}"))
}

#[test]
fn a_cycle_in_step_costs_one_system_call() {
    let Some(machine) = privileged("a_cycle_in_step_costs_one_system_call") else {
        return;
    };
    if !tessera_sys::process::installed("strace") {
        eprintln!("SKIPPED a_cycle_in_step_costs_one_system_call: strace missing (apt-get install strace)");
        return;
    }
    let dir = machine.dir();
    let exe = compile("syscalls.c", &dir);
    const PAIRS: u64 = 5000;
    let without = main_thread_syscalls(&exe, &dir, 0);
    let with = main_thread_syscalls(&exe, &dir, PAIRS);
    let per_pair = with.saturating_sub(without) as f64 / PAIRS as f64;
    eprintln!("{with} system calls with {PAIRS} pairs, {without} without");
    // One read of the thread's CPU clock, in finish: a cycle that starts
    // in step with the last one's finish is measured from it. Joining and
    // closing vary by a few calls (futex waits): 1 % of slack.
    assert!(
        (per_pair - 1.0).abs() < 0.01,
        "{per_pair:.3} system calls per start + finish ({with} with {PAIRS} pairs, {without} without)"
    );
}

/// Compiler and linker flags from crates/libtessera/tessera.pc, its
/// prefix's directories pointed at this tree's header and `libdir`.
fn pkg_config_flags(libdir: &Path) -> Vec<String> {
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", CRATE)
        .arg(format!("--define-variable=includedir={CRATE}/include"))
        .arg(format!("--define-variable=libdir={}", libdir.display()))
        .args(["--cflags", "--libs", "tessera"])
        .output()
        .expect("pkg-config runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn a_cpp_host_built_through_pkg_config_runs_best_effort_without_privileges() {
    let Some(machine) =
        privileged("a_cpp_host_built_through_pkg_config_runs_best_effort_without_privileges")
    else {
        return;
    };
    let lib = built_library();
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    assert!(
        dynamic.contains("Library soname: [libtessera.so.0]"),
        "{dynamic}"
    );

    // Everything the unprivileged user runs or writes, readable by it.
    let dir = machine.dir();
    let host = dir.join("cpp");
    let run = host.join("run");
    std::fs::create_dir_all(&run).unwrap();
    for d in [&dir, &host] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::chown(&run, Some(NOBODY), Some(NOBODY)).unwrap();
    place_library(&host);
    let exe = host.join("best_effort");
    let out = Command::new("c++")
        .arg(Path::new(CRATE).join("tests/c/best_effort.cpp"))
        .args(pkg_config_flags(&host))
        .arg(format!("-Wl,-rpath,{}", host.display()))
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .output()
        .expect("c++ runs");
    assert!(
        out.status.success(),
        "c++: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ids = NOBODY.to_string();
    let out = Command::new("setpriv")
        .args(["--reuid", &ids, "--regid", &ids, "--clear-groups"])
        .arg(&exe)
        .env("TESSERA_RUN_DIR", &run)
        .output()
        .expect("setpriv runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // TESSERA_BEST_EFFORT (1) from the open and the join, no error from the
    // intervals, the leave or the close.
    assert!(
        said.contains("opened=1 guaranteed=0 joined=1 intervals=0 left=0 closed=0"),
        "{said}"
    );
}

/// nobody's uid and gid on Debian.
const NOBODY: u32 = 65534;

/// The daemon's socket in `dir`, open to every user (`socket_world`),
/// served by this build's `tessera daemon`, killed when dropped (before
/// the machine's reset, which needs the broker's lock), also when the test
/// fails.
fn world_daemon(dir: &Path) -> Reaped {
    let deps = std::env::current_exe().unwrap();
    let tessera = deps.parent().unwrap().parent().unwrap().join("tessera");
    assert!(
        tessera.is_file(),
        "{} is built first (cargo build --bins)",
        tessera.display()
    );
    let config = dir.join("daemon.toml");
    std::fs::write(&config, "socket_world = true\n").unwrap();
    let daemon = Command::new(&tessera)
        .args(["daemon", "--run-dir"])
        .arg(dir)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .unwrap();
    let since = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(dir.join("tessera.sock")).is_err() {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the daemon listens"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon
}

#[test]
fn another_users_workgroup_is_refused_to_a_c_host_with_its_code() {
    let Some(machine) = privileged("another_users_workgroup_is_refused_to_a_c_host") else {
        return;
    };
    let dir = machine.dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = compile("host.c", &dir);
    let daemon = world_daemon(&dir);
    // root's workgroup, opened through the daemon.
    let shape = tessera_broker::WorkgroupShape {
        capacity: 2,
        budget: tessera_policy::Budget::new(500_000, 10_000_000),
        core: None,
        for_process: None,
    };
    let mut session = tessera_broker::Session::daemon_at(&machine.paths).unwrap();
    session.open_workgroup("wg-roots", Some(shape)).unwrap();

    let ids = NOBODY.to_string();
    let out = Command::new("setpriv")
        .args(["--reuid", &ids, "--regid", &ids, "--clear-groups"])
        .arg(&host)
        .args(["wg-roots", "10", "0"])
        .env("TESSERA_RUN_DIR", &dir)
        .output()
        .expect("setpriv runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("open wg-roots: the workgroup belongs to another user"),
        "{said}"
    );
    let wg = session.open_workgroup("wg-roots", None).unwrap();
    assert!(wg.members.is_empty(), "nobody joined: {wg:?}");
    session.destroy_cell("wg-roots").unwrap();
    drop(daemon);
}
