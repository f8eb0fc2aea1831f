//! The `tessera` binary end to end, as root against the real kernel: the
//! daemon and its protocol, dead clients, a killed and restarted daemon,
//! `cell exec`, `reset` after a crash, quotas, and best-effort mode for an
//! unprivileged user. Each test holds the machine alone and resets it after.

mod common;

use common::{as_nobody, privileged, wait_until, Machine};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn policy_of(pid: u32) -> String {
    format!("{}", tessera_sys::sched::get_policy(pid as i32).unwrap())
}

fn cells(m: &Machine) -> Vec<String> {
    m.json(&["cell", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// Runs in a child process: joins a cell bound to this process, then waits
/// to be killed. (Invoked by the tests below through the test binary.)
#[test]
fn client_helper() {
    let Ok(cell) = std::env::var("TESSERA_TEST_CLIENT_CELL") else {
        return;
    };
    let mut s = tessera_broker::Session::connect().unwrap();
    let mut req = tessera_policy::CellRequest::event_triggered(cell.clone(), 300_000, 1_000_000);
    if std::env::var("TESSERA_TEST_CLIENT_GLOBAL").is_ok() {
        req.placement = tessera_policy::Placement::Global;
    }
    s.create_cell(req, true).unwrap();
    s.join_current_thread(&cell).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

fn start_client(m: &mut Machine, cell: &str) -> usize {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "client_helper",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TESSERA_RUN_DIR", &m.dir)
    .env("TESSERA_TEST_CLIENT_CELL", cell)
    .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !line.contains("ready") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "client helper died before it was ready"
        );
    }
    m.children.push(child);
    m.children.len() - 1
}

#[test]
fn a_killed_clients_cell_returns_its_bandwidth_through_the_daemon() {
    let Some(mut m) = privileged("killed-client") else {
        return;
    };
    m.start_daemon(None);
    let client = start_client(&mut m, "doomed");
    assert_eq!(cells(&m), vec!["doomed"]);
    m.kill(client);
    wait_until("the daemon releases the dead client's cell", || {
        cells(&m).is_empty()
    });
    let status = m.json(&["status", "--json"]);
    assert!(
        status["cores"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["mode"] == "shared"),
        "{status}"
    );
}

#[test]
fn a_killed_clients_cell_is_released_by_the_next_embedded_broker() {
    let Some(mut m) = privileged("killed-embedded") else {
        return;
    };
    let client = start_client(&mut m, "doomed");
    m.kill(client);
    assert!(
        cells(&m).is_empty(),
        "the next command reaps the dead client's cell"
    );
}

/// A `sleep 60` attached to a new cell `name` of 200 µs every 1 ms.
fn sleeper_in_a_cell(m: &mut Machine, name: &str) -> u32 {
    let budget = ["--runtime", "200us", "--period", "1ms"];
    let mut create = vec!["cell", "create", name, "--policy", "event-triggered"];
    create.extend(budget);
    m.ok(&create);
    let sleeper = m.spawn(Command::new("sleep").arg("60"));
    m.ok(&["cell", "attach", name, "--pid", &sleeper.to_string()]);
    sleeper
}

#[test]
fn the_daemon_recovers_after_sigkill() {
    let Some(mut m) = privileged("daemon-recovery") else {
        return;
    };
    let d1 = m.start_daemon(None);
    let sleeper = sleeper_in_a_cell(&mut m, "keep");
    let client = start_client(&mut m, "gone");
    m.kill(d1);
    m.kill(client);
    assert!(
        policy_of(sleeper).starts_with("SCHED_DEADLINE runtime 200 µs"),
        "{}",
        policy_of(sleeper)
    );
    m.start_daemon(None);
    assert_eq!(
        cells(&m),
        vec!["keep"],
        "the dead client's cell is released, the live one kept"
    );
    let keep = m.json(&["cell", "show", "keep", "--json"]);
    assert_eq!(keep["members"][0]["pid"], sleeper);
    assert!(
        policy_of(sleeper).starts_with("SCHED_DEADLINE runtime 200 µs"),
        "the reservation is kept"
    );
}

#[test]
fn a_terminated_daemon_removes_its_socket_and_the_next_keeps_its_cells() {
    let Some(mut m) = privileged("daemon-sigterm") else {
        return;
    };
    let d1 = m.start_daemon(None);
    let sleeper = sleeper_in_a_cell(&mut m, "kept");
    // A budget change the daemon holds back up to a second before saving
    // it: the stop saves it.
    m.ok(&[
        "cell",
        "resize",
        "kept",
        "--runtime",
        "300us",
        "--period",
        "1ms",
    ]);
    let daemon = m.children[d1].id().to_string();
    let kill = Command::new("kill").args(["-TERM", &daemon]).status();
    assert!(kill.is_ok_and(|s| s.success()), "kill -TERM {daemon}");
    let mut status = None;
    wait_until("the daemon exits", || {
        status = m.children[d1].try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "a clean stop: {status:?}");
    assert!(
        !m.dir.join("tessera.sock").exists(),
        "no socket left for clients to try"
    );
    assert!(
        policy_of(sleeper).starts_with("SCHED_DEADLINE runtime 300 µs"),
        "the cell's member keeps its reservation: {}",
        policy_of(sleeper)
    );
    m.start_daemon(None);
    assert_eq!(cells(&m), vec!["kept"], "re-admitted from the state");
    assert!(
        policy_of(sleeper).starts_with("SCHED_DEADLINE runtime 300 µs"),
        "re-admitted at the budget saved on the way out: {}",
        policy_of(sleeper)
    );
}

#[test]
fn garbage_on_the_socket_gets_an_error_and_the_connection_stays_usable() {
    let Some(mut m) = privileged("garbage") else {
        return;
    };
    m.start_daemon(None);
    let stream = UnixStream::connect(m.dir.join("tessera.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    let mut ask = |line: &str| -> serde_json::Value {
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    };
    let bad = ask("this is not json {");
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["error"]["code"], "malformed");
    assert!(bad["error"]["fix"]
        .as_str()
        .unwrap()
        .contains("\"op\":\"status\""));
    assert_eq!(
        ask(r#"{"v":1,"id":2,"op":"launch-missiles"}"#)["error"]["code"],
        "malformed"
    );
    assert_eq!(
        ask(r#"{"v":9,"id":3,"op":"status"}"#)["error"]["code"],
        "version"
    );
    let unknown = ask(r#"{"v":1,"id":4,"op":"destroy-cell","name":"nope"}"#);
    assert_eq!(unknown["error"]["code"], "not-found");
    let ok = ask(r#"{"v":1,"id":5,"op":"status"}"#);
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["id"], 5);
}

#[test]
fn exec_runs_a_program_inside_the_cell_and_returns_its_status() {
    let Some(m) = privileged("exec") else { return };
    create_synth(&m);
    // A thread that is not real-time runs on the cell's core at its own policy.
    let out = m.ok(&[
        "cell",
        "exec",
        "synth",
        "--",
        "sh",
        "-c",
        "cat /proc/$$/cpuset; chrt -p $$",
    ]);
    assert!(out.contains("/tessera/core"), "{out}");
    assert!(out.contains("SCHED_OTHER"), "{out}");
    let status = m
        .run(&["cell", "exec", "synth", "--", "sh", "-c", "exit 7"])
        .status;
    assert_eq!(status.code(), Some(7));
    let missing = m.run(&["cell", "exec", "synth", "--", "/nonexistent/program"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("could not run"));
    assert_eq!(
        m.json(&["cell", "show", "synth", "--json"])["members"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "the failed exec left its slot free"
    );
}

fn create_synth(m: &Machine) {
    m.ok(&[
        "cell",
        "create",
        "synth",
        "--policy",
        "event-triggered",
        "--runtime",
        "400us",
        "--period",
        "1333us",
    ]);
}

fn cpuset_tree() -> (Vec<String>, String) {
    let root = Path::new("/sys/fs/cgroup/cpuset");
    let mut dirs: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    (
        dirs,
        std::fs::read_to_string(root.join("cpuset.sched_load_balance")).unwrap(),
    )
}

#[test]
fn reset_restores_the_cpuset_tree_even_after_the_state_is_lost() {
    let Some(mut m) = privileged("reset") else {
        return;
    };
    let before = cpuset_tree();
    let sleeper = m.spawn(Command::new("sleep").arg("60"));
    let before_policy = policy_of(sleeper);
    create_synth(&m);
    m.ok(&["cell", "attach", "synth", "--pid", &sleeper.to_string()]);
    assert_ne!(cpuset_tree(), before);
    let out = m.ok(&["reset"]);
    assert!(out.contains("1 thread(s) restored"), "{out}");
    assert_eq!(cpuset_tree(), before);
    assert_eq!(policy_of(sleeper), before_policy);
    // A crash that lost the state file: reset still finds tessera's groups.
    create_synth(&m);
    m.ok(&["cell", "attach", "synth", "--pid", &sleeper.to_string()]);
    std::fs::remove_file(m.dir.join("state.json")).unwrap();
    let out = m.ok(&["reset"]);
    assert!(out.contains("demoted"), "{out}");
    assert_eq!(cpuset_tree(), before);
    assert_eq!(policy_of(sleeper), "SCHED_OTHER nice 0");
}

#[test]
fn the_socket_is_private_and_quotas_bind_other_users() {
    let Some(mut m) = privileged("quota") else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = m.start_daemon(None);
    let refused = as_nobody(&m, &["status"]);
    assert_eq!(refused.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("does not accept you"));
    m.kill(d);
    let config = m.dir.join("daemon.toml");
    std::fs::write(&config, "socket_world = true\ndefault_quota = 0.25\n").unwrap();
    m.start_daemon(Some(&config));
    let create = |name: &str, runtime: &str| {
        as_nobody(
            &m,
            &[
                "cell",
                "create",
                name,
                "--policy",
                "event-triggered",
                "--runtime",
                runtime,
                "--period",
                "1ms",
                "--placement",
                "global",
            ],
        )
    };
    assert!(create("mine", "200us").status.success());
    let over = create("more", "100us");
    assert_eq!(over.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&over.stderr).contains("over their quota of 0.25"));
    let theirs = as_nobody(&m, &["cell", "destroy", "mine"]);
    assert!(
        theirs.status.success(),
        "an owner may destroy their own cell"
    );
    m.ok(&["cell", "create", "roots", "--policy", "best-effort"]);
    let denied = as_nobody(&m, &["cell", "destroy", "roots"]);
    assert_eq!(denied.status.code(), Some(4));
}

/// `tessera ARGS` in a mount namespace of its own without the machine's
/// cgroups, as `ip netns exec` makes one; the machine's mounts stay as
/// they are.
fn without_cgroups(m: &Machine, args: &[&str]) -> Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("umount -l /sys/fs/cgroup && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_RUN_DIR", &m.dir)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare")
}

#[test]
fn root_without_cgroups_in_view_is_told_why_a_partitioned_cell_is_refused() {
    let Some(m) = privileged("no-cgroups") else {
        return;
    };
    let out = without_cgroups(
        &m,
        &[
            "cell",
            "create",
            "part",
            "--policy",
            "event-triggered",
            "--runtime",
            "100us",
            "--period",
            "1ms",
            "--placement",
            "partitioned",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("none is mounted here"), "{stderr}");
    assert!(stderr.contains("nsenter --net"), "{stderr}");
    assert!(!stderr.contains("need root"), "{stderr}");
    // The way out the refusal names: a network service in a global cell.
    let socket = m.dir.join("net.sock");
    let out = without_cgroups(
        &m,
        &[
            "serve",
            "net",
            "--placement",
            "global",
            "--no-discovery",
            "--seconds",
            "0.3",
            "--socket",
            socket.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("SCHED_DEADLINE, global EDF"), "{stdout}");
}

#[test]
fn without_privileges_tessera_runs_best_effort_and_says_so() {
    let Some(mut m) = privileged("best-effort") else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let status = as_nobody(&m, &["status"]);
    assert!(status.status.success());
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("BEST-EFFORT MODE") && text.contains("setcap cap_sys_nice+ep"),
        "{text}"
    );
    assert!(as_nobody(
        &m,
        &[
            "cell",
            "create",
            "s",
            "--policy",
            "event-triggered",
            "--runtime",
            "400us",
            "--period",
            "1333us"
        ]
    )
    .status
    .success());
    let mut sleep = Command::new("setpriv");
    sleep.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sleep",
        "60",
    ]);
    let pid = m.spawn(&mut sleep);
    wait_until("the sleeper runs as nobody", || {
        tessera_sys::proc::owner_uid(pid as i32).is_ok_and(|u| u == 65534)
    });
    assert!(
        as_nobody(&m, &["cell", "attach", "s", "--pid", &pid.to_string()])
            .status
            .success()
    );
    assert_eq!(
        policy_of(pid),
        "SCHED_OTHER nice 0",
        "best-effort mode changes no scheduling"
    );
    let socket = m.dir.join("render.sock");
    let render = as_nobody(
        &m,
        &[
            "serve",
            "render",
            "--seconds",
            "0.3",
            "--socket",
            socket.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&render.stdout);
    assert!(render.status.success(), "{text}");
    assert!(
        text.contains("BEST-EFFORT") && text.contains("setcap cap_sys_nice+ep"),
        "the render service says it guarantees nothing and how to fix it: {text}"
    );
}

/// The program makes its (main) thread SCHED_FIFO after it started, as audio
/// programs do (with SCHED_RESET_ON_FORK, as RTKit asks: the shell's
/// children — `chrt`, `seq`, `sleep` — start at SCHED_OTHER, or the first
/// of them the connector hears of would take the cell's one reservation
/// before the main thread's policy is polled); tessera follows it into the
/// cell's reservation, returns the program's status, and leaves no member
/// behind.
#[test]
fn exec_follows_a_thread_made_real_time_later_and_leaves_nothing_behind() {
    let Some(m) = privileged("exec-follow") else {
        return;
    };
    create_synth(&m);
    let script = "chrt -f -R -p 10 $$; \
        for i in $(seq 40); do \
          chrt -p $$ | grep -q SCHED_DEADLINE && break; sleep 0.05; \
        done; \
        chrt -p $$; exit 7";
    let out = m.run(&["cell", "exec", "synth", "--", "sh", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "the program's status");
    assert!(
        stdout.contains("SCHED_DEADLINE") && stdout.contains("400000/1333000/1333000"),
        "the thread made FIFO got the reservation: {stdout}"
    );
    assert!(
        stderr.contains("threads are found by process-events connector (immediate)"),
        "the mechanism is named: {stderr}"
    );
    assert!(stderr.contains("its own reservation"), "{stderr}");
    assert_eq!(
        m.json(&["cell", "show", "synth", "--json"])["members"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "no member is left behind"
    );
    // A signal sent to tessera reaches the program; its status says so.
    let mut cmd = m.tessera();
    cmd.args(["cell", "exec", "synth", "--", "sleep", "30"]);
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn tessera");
    let tessera = child.id() as i32;
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("threads are found by") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "tessera said nothing"
        );
    }
    tessera_sys::process::signal_child(tessera, 15).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "sleep died of SIGTERM");
    assert_eq!(
        m.json(&["cell", "show", "synth", "--json"])["members"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

/// `attach --follow` reserves a running program's real-time thread and,
/// stopped by a signal, gives it back the policy its program set.
#[test]
fn attach_follow_reserves_a_running_programs_fifo_thread_until_stopped() {
    let Some(mut m) = privileged("attach-follow") else {
        return;
    };
    create_synth(&m);
    // Outlives the test: a program that exits first ends the follow
    // before the signal (exit 0).
    let program = m.spawn(Command::new("chrt").args(["-f", "10", "sleep", "600"]));
    let pid = program as i32;
    wait_until("the program is SCHED_FIFO", || {
        policy_of(program).starts_with("SCHED_FIFO")
    });
    let mut cmd = m.tessera();
    cmd.args([
        "cell",
        "attach",
        "synth",
        "--pid",
        &pid.to_string(),
        "--follow",
    ]);
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn tessera");
    let tessera = child.id() as i32;
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("its own reservation") {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "tessera said: {said}"
        );
        said.push_str(&line);
    }
    assert!(policy_of(program).starts_with("SCHED_DEADLINE"), "{said}");
    // SIGTERM, not SIGINT: a test run in the background (`cmd &` in a
    // script) inherits SIGINT ignored, and tessera keeps an ignored
    // signal ignored, as programs under nohup or `&` should.
    tessera_sys::process::signal_child(tessera, 15).unwrap();
    let status = child.wait().unwrap();
    err.read_to_string(&mut said).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "stopped by SIGTERM: {said}");
    assert_eq!(policy_of(program), "SCHED_FIFO priority 10", "restored");
    assert_eq!(
        m.json(&["cell", "show", "synth", "--json"])["members"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

/// A flow through the network service process, opened by name.
fn music_flow(reservation_bps: u64) -> tessera_services::net::FlowRequest {
    tessera_services::net::FlowRequest {
        name: "music".into(),
        class: tessera_services::net::Class::RealTime,
        reservation_bps,
        weight: 1,
        limit_bps: None,
        bind: "127.0.0.1:0".parse().unwrap(),
        peer: None,
        max_datagram: 1472,
        slots: 64,
        response_deadline_ns: None,
        multicast: None,
        rtp_clock_rate: None,
    }
}

#[test]
fn the_network_service_is_opened_by_name_admits_what_fits_and_its_death_is_an_error() {
    use tessera_services::net::{client, ChannelError, Flow, NetError};
    let Some(mut m) = privileged("tessera serve net") else {
        return;
    };
    std::env::set_var("TESSERA_RUN_DIR", &m.dir);
    let socket = m.dir.join("net.sock");
    let mut serve = m.tessera();
    serve.args([
        "serve",
        "net",
        "--no-discovery",
        "--link-rate",
        "100mbit",
        "--socket",
    ]);
    serve.arg(&socket).stdout(Stdio::null());
    let pid = m.spawn(&mut serve);
    // It listens a moment before its name is registered: wait for the name,
    // which is what a client opening it by name needs.
    wait_until("the service is registered", || {
        tessera_broker::Session::connect()
            .and_then(|mut s| s.list_services())
            .is_ok_and(|services| services.iter().any(|s| s.entry.name == "net"))
    });
    let services = m.json(&["services", "--json"]);
    let entry = &services.as_array().unwrap()[0];
    assert_eq!(
        (entry["name"].as_str(), entry["alive"].as_bool()),
        (Some("net"), Some(true))
    );
    let status = m.json(&["net", "status", "--json"]);
    assert_eq!(status["usable_bps"], 95_000_000);
    assert!(
        status["real_time"]
            .as_str()
            .unwrap()
            .contains("SCHED_DEADLINE"),
        "{status}"
    );
    let mut flow = Flow::open(
        client::connect_by_name("net").unwrap(),
        &music_flow(60_000_000),
    )
    .expect("60 of 95 Mbit/s fits");
    match Flow::open(
        client::connect_by_name("net").unwrap(),
        &music_flow(60_000_000),
    ) {
        Err(NetError::Refused(reason)) => {
            assert!(reason.contains("35 Mbit/s would fit"), "{reason}")
        }
        _ => panic!("admitted beyond the capacity"),
    }
    let index = m.children.iter().position(|c| c.id() == pid).unwrap();
    m.kill(index);
    match flow.receive(Duration::from_secs(10)) {
        Err(ChannelError::PeerGone { pid: gone }) => assert_eq!(gone as u32, pid),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a datagram from a dead service"),
    }
    let services = m.json(&["services", "--json"]);
    assert!(
        services
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["alive"] == false),
        "{services}"
    );
}

/// The render service's status, asked over its socket.
fn render_status(socket: &Path) -> Option<tessera_services::render::wire::Status> {
    use tessera_services::render::client;
    client::status(client::connect(socket).ok()?).ok()
}

#[test]
fn the_render_service_gives_an_sla_its_own_cell_outlives_a_killed_player_and_gives_its_cells_back()
{
    let Some(mut m) = privileged("tessera serve render") else {
        return;
    };
    let socket = m.dir.join("render.sock");
    let mut serve = m.tessera();
    serve.args(["serve", "render", "--screen", "800x600", "--socket"]);
    serve.arg(&socket).stdout(Stdio::null());
    let server = m.spawn(&mut serve);
    wait_until("the service answers", || render_status(&socket).is_some());
    let served_cells = |m: &Machine| {
        cells(m)
            .into_iter()
            .filter(|c| c.starts_with(&format!("render-{server}-")))
            .collect::<Vec<_>>()
    };
    assert_eq!(served_cells(&m).len(), 3, "best-effort, probing, front-end");
    let play = |m: &Machine, name: &str, frames: &str, probes: &str| {
        let mut player = m.tessera();
        player.args(["render", "play", "--socket"]).arg(&socket);
        player.args(["--player", name, "--fps", "30", "--frames", frames]);
        player.args(["--spin", "1ms", "--probes", probes, "--json"]);
        player
    };
    let steady = play(&m, "steady", "150", "20")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a player");
    let victim = m.spawn(&mut play(&m, "victim", "100000", "0"));
    wait_until("the steady player has an SLA and the victim plays", || {
        render_status(&socket).is_some_and(|s| {
            let share = |n: &str| {
                s.clients
                    .iter()
                    .find(|c| c.name == n)
                    .map(|c| c.share.clone())
            };
            share("steady").is_some_and(|s| s.starts_with("SLA"))
                && s.clients
                    .iter()
                    .any(|c| c.name == "victim" && c.actions > 10)
        })
    });
    assert_eq!(served_cells(&m).len(), 4, "and the SLA's own cell");
    let index = m.children.iter().position(|c| c.id() == victim).unwrap();
    m.kill(index);
    wait_until("the killed player is gone from the service", || {
        render_status(&socket).is_some_and(|s| s.clients.iter().all(|c| c.name != "victim"))
    });
    let out = steady.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["sla_note"]
            .as_str()
            .unwrap()
            .contains("SCHED_DEADLINE"),
        "{report}"
    );
    assert_eq!(report["lost"], 0, "every frame sent was shown: {report}");
    assert_eq!(
        report["shown"].as_u64().unwrap() + report["not_sent"].as_u64().unwrap(),
        150
    );
    wait_until("the SLA's cell is given back with its client", || {
        served_cells(&m).len() == 3
    });
    tessera_sys::process::signal_child(server as i32, 15).unwrap();
    let index = m.children.iter().position(|c| c.id() == server).unwrap();
    let status = m.children[index].wait().unwrap();
    assert!(status.success(), "stopped by SIGTERM: {status}");
    assert!(served_cells(&m).is_empty(), "every cell given back");
}

/// A busy loop at SCHED_FIFO 5, as an audio program's thread would be.
fn busy_loop(m: &mut Machine) -> u32 {
    m.spawn(Command::new("chrt").args(["-f", "5", "sh", "-c", "while :; do :; done"]))
}

/// The newest sample of `cell` the monitor has.
fn sampled(m: &Machine, cell: &str) -> Option<serde_json::Value> {
    let sample = m.json(&["top", "--json", "-n", "1", "-d", "0.2"]);
    sample["cells"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == cell)
        .cloned()
}

fn budget_us(m: &Machine, cell: &str) -> u64 {
    m.json(&["cell", "show", cell, "--json"])["grant"]["request"]["budget"]["runtime_ns"]
        .as_u64()
        .unwrap()
        / 1000
}

#[test]
fn the_monitor_sees_use_and_reports_shows_them_in_top_and_continues_across_a_daemon_restart() {
    let Some(mut m) = privileged("monitor") else {
        return;
    };
    let config = m.dir.join("daemon.toml");
    std::fs::write(&config, "monitor_interval_ms = 200\n").unwrap();
    let daemon = m.start_daemon(Some(&config));
    let create = |m: &Machine, name: &str, runtime: &str, extra: &[&str]| {
        let mut args = vec!["cell", "create", name, "--policy", "event-triggered"];
        args.extend(["--runtime", runtime, "--period", "10ms"]);
        args.extend(extra);
        m.ok(&args);
    };
    create(&m, "busy", "1ms", &[]);
    create(&m, "quiet", "500us", &["--pinned"]);
    let hog = busy_loop(&mut m);
    m.ok(&["cell", "attach", "busy", "--pid", &hog.to_string()]);
    m.ok(&["cell", "report", "busy", "--misses", "2"]);
    wait_until("the monitor sees the busy cell use its budget", || {
        sampled(&m, "busy").is_some_and(|c| {
            c["used_ns"].as_u64().is_some_and(|u| u > 500_000) && c["misses_total"] == 2
        })
    });
    let top = m.ok(&["top", "-b", "-n", "1", "-s", "name", "--threads"]);
    let busy = top
        .lines()
        .position(|l| l.starts_with("busy "))
        .expect(&top);
    let quiet = top
        .lines()
        .position(|l| l.starts_with("quiet "))
        .expect(&top);
    assert!(busy < quiet, "sorted by name: {top}");
    assert!(
        top.contains("1000µs/10000µs") && top.contains("500µs/10000µs"),
        "{top}"
    );
    assert!(top.lines().nth(quiet).unwrap().ends_with("pinned"), "{top}");
    assert!(top.contains(&format!("└ {hog}")), "its thread: {top}");
    let restart = tessera_broker::monitor::unix_ms();
    m.kill(daemon);
    m.start_daemon(Some(&config));
    m.ok(&["cell", "report", "busy", "--misses", "1"]);
    wait_until("the restarted daemon's monitor continues", || {
        sampled(&m, "busy").is_some_and(|c| c["misses_total"] == 3 && c["used_ns"].is_u64())
    });
    std::env::set_var("TESSERA_RUN_DIR", &m.dir);
    let series = tessera_broker::Session::connect()
        .unwrap()
        .monitor(None, 60_000)
        .unwrap();
    assert!(
        series.iter().any(|s| s.t_unix_ms < restart),
        "samples from before"
    );
    assert!(
        series.iter().any(|s| s.t_unix_ms > restart),
        "and after the restart"
    );
}

#[test]
fn adaptation_grows_a_cell_that_misses_within_admission_shrinks_an_idle_one_and_leaves_a_pinned_one_and_an_owners(
) {
    let Some(mut m) = privileged("adaptation") else {
        return;
    };
    let config = m.dir.join("daemon.toml");
    std::fs::write(
        &config,
        "monitor_interval_ms = 200\n[adaptation]\nenabled = true\ninterval_ms = 400\npatience = 2\n",
    )
    .unwrap();
    m.start_daemon(Some(&config));
    let create = |m: &Machine, name: &str, runtime: &str, extra: &[&str]| {
        let mut args = vec!["cell", "create", name, "--policy", "event-triggered"];
        args.extend(["--runtime", runtime, "--period", "10ms", "--core-list", "1"]);
        args.extend(extra);
        m.ok(&args);
    };
    // Core 1 holds 0.9 of a core for reservations: the pinned 0.6 and the
    // owner's 0.05 leave the busy cell room to grow to 0.25 at most, beside
    // the idle 0.1's shrinking.
    create(&m, "fixed", "6ms", &["--pinned"]);
    create(&m, "busy", "1ms", &[]);
    create(&m, "idle", "1ms", &[]);
    create(&m, "owned", "500us", &["--owner-adapts"]);
    let hog = busy_loop(&mut m);
    m.ok(&["cell", "attach", "busy", "--pid", &hog.to_string()]);
    let fixed_hog = busy_loop(&mut m);
    m.ok(&["cell", "attach", "fixed", "--pid", &fixed_hog.to_string()]);
    let sleeper = m.spawn(Command::new("chrt").args(["-f", "5", "sleep", "60"]));
    m.ok(&["cell", "attach", "idle", "--pid", &sleeper.to_string()]);
    // Idle too: the daemon would shrink it, were it not its owner's.
    let owned_sleeper = m.spawn(Command::new("chrt").args(["-f", "5", "sleep", "60"]));
    m.ok(&[
        "cell",
        "attach",
        "owned",
        "--pid",
        &owned_sleeper.to_string(),
    ]);
    wait_until("the busy cell grows as it misses", || {
        m.ok(&["cell", "report", "busy", "--misses", "1"]);
        budget_us(&m, "busy") > 1000
    });
    wait_until("the idle cell shrinks after its patience", || {
        budget_us(&m, "idle") < 1000
    });
    // It keeps missing: it grows until admission stops it.
    for _ in 0..20 {
        m.ok(&["cell", "report", "busy", "--misses", "1"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    let (busy, idle, fixed) = (
        budget_us(&m, "busy"),
        budget_us(&m, "idle"),
        budget_us(&m, "fixed"),
    );
    assert_eq!(fixed, 6000, "the pinned cell is never changed");
    assert_eq!(budget_us(&m, "owned"), 500, "nor the cell its owner adapts");
    assert!(
        busy + idle + fixed + 500 <= 9000,
        "core 1's capacity holds: busy {busy} µs, idle {idle} µs, fixed {fixed} µs, owned 500 µs"
    );
    assert!(busy >= 2000, "the busy cell took what was free: {busy} µs");
    assert!(
        policy_of(hog).contains(&format!("runtime {busy} µs")),
        "its thread has the new budget: {}",
        policy_of(hog)
    );
    m.ok(&[
        "cell",
        "resize",
        "owned",
        "--runtime",
        "400us",
        "--period",
        "10ms",
    ]);
    assert_eq!(budget_us(&m, "owned"), 400, "its owner still resizes it");
}

#[test]
fn a_workgroup_for_a_process_that_is_no_audio_server_is_refused_with_the_fix() {
    let Some(mut m) = privileged("a_workgroup_for_a_process_that_is_no_audio_server") else {
        return;
    };
    let sleeper = m.spawn(Command::new("sleep").arg("30")).to_string();
    let out = m
        .tessera()
        .args([
            "guard",
            "pid",
            &sleeper,
            "--period",
            "10ms",
            "--workgroup",
            "2",
        ])
        .args(["--seconds", "1", "--quiet"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("only an audio server's"), "{stderr}");
    assert!(
        stderr.contains("tessera guard jackd|pipewire --workgroup"),
        "{stderr}"
    );
    assert!(cells(&m).is_empty(), "nothing was made: {:?}", cells(&m));
}
