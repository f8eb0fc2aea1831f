//! The engine end to end, under the allocation guard: every test checks that
//! no cycle touched the heap.

mod common;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{constant, FnNode, PATIENCE};
use tessera_graph::profiler::{CYCLES_CSV_HEADER, NODES_CSV_HEADER};
use tessera_graph::{
    nodes, Callbacks, Engine, EngineConfig, EngineError, Event, FreewheelDriver, Graph, NodeId,
    PacketConfig, PacketDriver, PortId, PortSpec, StreamConfig, ThreadRole, TimerDriver,
    XrunReport,
};
use tessera_rtguard::{assert_no_rt_allocations, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn stream() -> StreamConfig {
    StreamConfig::new(64, 48_000).unwrap()
}

fn config(workers: usize) -> EngineConfig {
    EngineConfig {
        workers,
        profile_cycles: 256,
        ..EngineConfig::default()
    }
}

fn connect(graph: &mut Graph, from: NodeId, out: &str, to: NodeId, input: &str) {
    let (from, to) = (
        graph.port(from, out).unwrap(),
        graph.port(to, input).unwrap(),
    );
    graph.connect(from, to).unwrap();
}

fn run_freewheel(graph: Graph, workers: usize, cycles: u64) -> tessera_graph::RunReport {
    let engine = Engine::start(graph, stream(), FreewheelDriver, config(workers)).unwrap();
    assert!(engine.wait_for_cycles(cycles, PATIENCE));
    engine.stop().unwrap()
}

#[test]
fn each_node_sees_its_predecessors_output_of_the_same_cycle() {
    // a → (b, c) → d: a writes the cycle number, b and c add 1, d checks
    // (n+1) + (n+1) arrived mixed.
    let errors = Arc::new(AtomicU64::new(0));
    let checked = Arc::new(AtomicU64::new(0));
    let mut graph = Graph::new();
    let a = graph
        .add_node(
            "a",
            FnNode::boxed(vec![PortSpec::audio_out("out")], |ctx| {
                let value = (ctx.cycle() % 1000) as f32;
                ctx.audio_out(0).fill(value);
            }),
        )
        .unwrap();
    let plus_one = |errors: Arc<AtomicU64>| {
        FnNode::boxed(
            vec![PortSpec::audio_in("in"), PortSpec::audio_out("out")],
            move |ctx| {
                let expected = (ctx.cycle() % 1000) as f32;
                let input = ctx.audio_in(0);
                if input.iter().any(|&s| s != expected) {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                for (out, s) in ctx.audio_out(0).iter_mut().zip(input) {
                    *out = s + 1.0;
                }
            },
        )
    };
    let b = graph.add_node("b", plus_one(Arc::clone(&errors))).unwrap();
    let c = graph.add_node("c", plus_one(Arc::clone(&errors))).unwrap();
    let d = {
        let (errors, checked) = (Arc::clone(&errors), Arc::clone(&checked));
        graph
            .add_node(
                "d",
                FnNode::boxed(vec![PortSpec::audio_in("in")], move |ctx| {
                    let expected = 2.0 * ((ctx.cycle() % 1000) as f32 + 1.0);
                    if ctx.audio_in(0).iter().any(|&s| s != expected) {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    checked.fetch_add(1, Ordering::Relaxed);
                }),
            )
            .unwrap()
    };
    connect(&mut graph, a, "out", b, "in");
    connect(&mut graph, a, "out", c, "in");
    connect(&mut graph, b, "out", d, "in");
    connect(&mut graph, c, "out", d, "in");
    let report = run_freewheel(graph, 2, 200);
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    assert_eq!(checked.load(Ordering::Relaxed), report.cycles);
    assert_no_rt_allocations();
}

/// Marks `mine` for the cycle, then waits for `other` to do the same.
fn rendezvous(ctx_cycle: u64, mine: &AtomicU64, other: &AtomicU64, met: &AtomicU64) {
    mine.store(ctx_cycle + 1, Ordering::Release);
    let give_up = Instant::now() + PATIENCE;
    while other.load(Ordering::Acquire) < ctx_cycle + 1 {
        if Instant::now() > give_up {
            return;
        }
        std::hint::spin_loop();
    }
    met.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn parallel_branches_run_at_the_same_time() {
    // Each node waits for the other to have started in the same cycle: both
    // can only succeed if they run concurrently.
    let (a_at, b_at, met) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut graph = Graph::new();
    for (name, mine, other) in [("a", &a_at, &b_at), ("b", &b_at, &a_at)] {
        let (mine, other, met) = (Arc::clone(mine), Arc::clone(other), Arc::clone(&met));
        graph
            .add_node(
                name,
                FnNode::boxed(vec![], move |ctx| {
                    rendezvous(ctx.cycle(), &mine, &other, &met)
                }),
            )
            .unwrap();
    }
    let report = run_freewheel(graph, 2, 20);
    assert_eq!(
        met.load(Ordering::Relaxed),
        2 * report.cycles,
        "every cycle both met"
    );
    let threads: std::collections::BTreeSet<u16> =
        report.profile.nodes.iter().map(|n| n.thread).collect();
    assert!(
        threads.len() >= 2,
        "nodes ran on several threads: {threads:?}"
    );
    assert_no_rt_allocations();
}

#[test]
fn fan_in_is_summed_exactly() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut graph = Graph::new();
    let sources: Vec<NodeId> = [1.0, 2.0, 4.5]
        .iter()
        .enumerate()
        .map(|(i, v)| graph.add_node(&format!("s{i}"), constant(*v)).unwrap())
        .collect();
    let mixer = graph
        .add_node("mixer", Box::new(nodes::Mixer::new(vec![0.5, 2.0])))
        .unwrap();
    let sink = {
        let seen = Arc::clone(&seen);
        graph
            .add_node(
                "sink",
                FnNode::boxed(
                    vec![PortSpec::audio_in("sum"), PortSpec::audio_in("mixed")],
                    move |ctx| {
                        if ctx.cycle() == 3 {
                            // try_lock: never wait on the real-time path.
                            if let Ok(mut seen) = seen.try_lock() {
                                seen.extend_from_slice(&[ctx.audio_in(0)[0], ctx.audio_in(1)[0]]);
                            }
                        }
                    },
                ),
            )
            .unwrap()
    };
    for source in &sources {
        connect(&mut graph, *source, "out", sink, "sum");
    }
    connect(&mut graph, sources[0], "out", mixer, "in0");
    connect(&mut graph, sources[1], "out", mixer, "in1");
    connect(&mut graph, sources[2], "out", mixer, "in1");
    connect(&mut graph, mixer, "out", sink, "mixed");
    // The Vec's capacity is reserved up front so the RT push cannot allocate.
    seen.lock().unwrap().reserve(8);
    run_freewheel(graph, 1, 10);
    // sum: 1 + 2 + 4.5; mixed: 0.5·1 + 2·(2 + 4.5)
    assert_eq!(*seen.lock().unwrap(), [7.5, 13.5]);
    assert_no_rt_allocations();
}

#[test]
fn event_inputs_merge_by_frame() {
    let frames = Arc::new(Mutex::new(Vec::with_capacity(8)));
    let mut graph = Graph::new();
    let source = |frame: u32| {
        FnNode::boxed(vec![PortSpec::event_out("out")], move |ctx| {
            let note = Event::midi(frame, &[0x90, 60, 100]).unwrap();
            ctx.events_out(0).push(note).unwrap();
        })
    };
    let late = graph.add_node("late", source(40)).unwrap();
    let early = graph.add_node("early", source(3)).unwrap();
    let sink = {
        let frames = Arc::clone(&frames);
        graph
            .add_node(
                "sink",
                FnNode::boxed(vec![PortSpec::event_in("in")], move |ctx| {
                    if let Ok(mut frames) = frames.try_lock() {
                        if frames.is_empty() {
                            frames.extend(ctx.events_in(0).events().iter().map(|e| e.frame));
                        }
                    }
                }),
            )
            .unwrap()
    };
    connect(&mut graph, late, "out", sink, "in");
    connect(&mut graph, early, "out", sink, "in");
    run_freewheel(graph, 1, 5);
    assert_eq!(
        *frames.lock().unwrap(),
        [3, 40],
        "one event per writer per cycle, by frame"
    );
    assert_no_rt_allocations();
}

#[derive(Default)]
struct Recorded {
    graph_changes: AtomicUsize,
    buffer_sizes: Mutex<Vec<u32>>,
    clients: Mutex<Vec<(String, bool)>>,
    ports: Mutex<Vec<String>>,
    xruns: Mutex<Vec<XrunReport>>,
    shutdowns: Mutex<Vec<String>>,
}

struct Recorder(Arc<Recorded>);

impl Callbacks for Recorder {
    fn graph_order_changed(&mut self, _version: u64, _cycle: u64) {
        self.0.graph_changes.fetch_add(1, Ordering::Relaxed);
    }
    fn xrun(&mut self, report: &XrunReport) {
        self.0.xruns.lock().unwrap().push(*report);
    }
    fn buffer_size_changed(&mut self, frames: u32) {
        self.0.buffer_sizes.lock().unwrap().push(frames);
    }
    fn client_registration(&mut self, _node: NodeId, name: &str, registered: bool) {
        self.0
            .clients
            .lock()
            .unwrap()
            .push((name.to_owned(), registered));
    }
    fn port_registration(&mut self, _port: PortId, name: &str, _registered: bool) {
        self.0.ports.lock().unwrap().push(name.to_owned());
    }
    fn shutdown(&mut self, reason: &str) {
        self.0.shutdowns.lock().unwrap().push(reason.to_owned());
    }
}

#[test]
fn graph_edits_mid_run_lose_no_cycle() {
    let (runs, gaps, last) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(u64::MAX)),
    );
    let mut graph = Graph::new();
    let counter = {
        let (runs, gaps, last) = (Arc::clone(&runs), Arc::clone(&gaps), Arc::clone(&last));
        graph
            .add_node(
                "counter",
                FnNode::boxed(vec![PortSpec::audio_in("in")], move |ctx| {
                    let previous = last.swap(ctx.cycle(), Ordering::Relaxed);
                    if previous != u64::MAX && previous + 1 != ctx.cycle() {
                        gaps.fetch_add(1, Ordering::Relaxed);
                    }
                    runs.fetch_add(1, Ordering::Relaxed);
                }),
            )
            .unwrap()
    };
    let recorded = Arc::new(Recorded::default());
    let config = EngineConfig {
        workers: 2,
        callbacks: Box::new(Recorder(Arc::clone(&recorded))),
        ..config(2)
    };
    let small = StreamConfig::new(32, 96_000).unwrap();
    let mut engine = Engine::start(graph, small, TimerDriver::new(), config).unwrap();
    for edit in 0..100u64 {
        let cycles_before = engine.cycles();
        let name = format!("sine{edit}");
        engine
            .edit(|graph| {
                let sine = graph.add_node(&name, Box::new(nodes::Sine::new(110.0, 0.1)))?;
                graph.connect(graph.port(sine, "out")?, graph.port(counter, "in")?)?;
                if edit > 0 {
                    let previous = graph.node_by_name(&format!("sine{}", edit - 1)).unwrap();
                    graph.remove_node(previous)?;
                }
                Ok(())
            })
            .unwrap();
        if edit % 25 == 24 {
            let frames = if edit % 50 == 24 { 64 } else { 32 };
            engine
                .set_stream_config(StreamConfig::new(frames, 96_000).unwrap())
                .unwrap();
        }
        // The edit is live before the next one.
        assert!(engine.wait_until_running(PATIENCE));
        assert!(engine.wait_for_cycles(cycles_before + 1, PATIENCE));
    }
    let report = engine.stop().unwrap();
    assert_eq!(
        gaps.load(Ordering::Relaxed),
        0,
        "cycle numbers are continuous"
    );
    assert_eq!(
        runs.load(Ordering::Relaxed),
        report.cycles,
        "the counter ran in every cycle"
    );
    assert!(recorded.graph_changes.load(Ordering::Relaxed) >= 1);
    assert_eq!(
        *recorded.buffer_sizes.lock().unwrap(),
        [64, 32, 64, 32],
        "buffer size changes reported"
    );
    let clients = recorded.clients.lock().unwrap();
    assert!(clients.contains(&("counter".to_owned(), true)));
    assert!(clients.contains(&("sine0".to_owned(), false)));
    assert!(recorded
        .ports
        .lock()
        .unwrap()
        .contains(&"sine99:out".to_owned()));
    assert_eq!(*recorded.shutdowns.lock().unwrap(), ["engine stopped"]);
    assert_no_rt_allocations();
}

#[test]
fn xrun_names_the_slow_node_and_the_timer_realigns() {
    const SLOW_CYCLE: u64 = 3;
    let stream = StreamConfig::new(256, 48_000).unwrap();
    let period = stream.period();
    let mut graph = Graph::new();
    let src = graph.add_node("src", constant(0.25)).unwrap();
    let slow = graph
        .add_node(
            "slow",
            FnNode::boxed(
                vec![PortSpec::audio_in("in"), PortSpec::audio_out("out")],
                move |ctx| {
                    if ctx.cycle() == SLOW_CYCLE {
                        std::thread::sleep(period * 4);
                    }
                    let input = ctx.audio_in(0);
                    ctx.audio_out(0).copy_from_slice(input);
                },
            ),
        )
        .unwrap();
    let sink = graph
        .add_node("sink", Box::new(nodes::Passthrough::new(1)))
        .unwrap();
    connect(&mut graph, src, "out", slow, "in");
    connect(&mut graph, slow, "out", sink, "in0");
    let recorded = Arc::new(Recorded::default());
    let config = EngineConfig {
        callbacks: Box::new(Recorder(Arc::clone(&recorded))),
        ..config(1)
    };
    let engine = Engine::start(graph, stream, TimerDriver::new(), config).unwrap();
    assert!(engine.wait_for_cycles(SLOW_CYCLE + 4, PATIENCE));
    let report = engine.stop().unwrap();
    assert!(report.xruns >= 1);

    let xruns = recorded.xruns.lock().unwrap();
    let slow_xrun = xruns
        .iter()
        .find(|x| x.cycle == SLOW_CYCLE)
        .expect("the slow cycle is an xrun");
    let worst = slow_xrun.late_nodes()[0];
    assert_eq!(worst.name.as_str(), "slow");
    assert_eq!(worst.node, slow);
    assert!(worst.finished_ns >= worst.awake_ns && worst.awake_ns >= worst.signalled_ns);
    assert!(slow_xrun.late_by_ns() > 0);

    // Recovery: the next cycle starts after the slow one ended, on the grid,
    // having skipped the periods that passed instead of catching up.
    let cycles = &report.profile.cycles;
    let late = cycles.iter().find(|c| c.cycle == SLOW_CYCLE).unwrap();
    let next = cycles.iter().find(|c| c.cycle == SLOW_CYCLE + 1).unwrap();
    assert!(late.xrun);
    assert!(next.start_ns >= late.start_ns + late.driver_end_ns);
    assert!(next.skipped_periods >= 1);
    assert_no_rt_allocations();
}

#[test]
fn a_catching_up_timer_runs_the_missed_cycles_on_their_own_due_times() {
    const SLOW_CYCLE: u64 = 3;
    const CYCLES: usize = 10;
    let stream = StreamConfig::new(256, 48_000).unwrap();
    let period = stream.period();
    let due: Arc<[AtomicU64; CYCLES]> = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let mut graph = Graph::new();
    let seen = Arc::clone(&due);
    graph
        .add_node(
            "slow",
            FnNode::boxed(vec![], move |ctx| {
                if let Some(slot) = seen.get(ctx.cycle() as usize) {
                    slot.store(ctx.cycle_due_ns(), Ordering::Relaxed);
                }
                if ctx.cycle() == SLOW_CYCLE {
                    std::thread::sleep(period * 5 / 2);
                }
            }),
        )
        .unwrap();
    // Far more than the stall: only a stall of seconds would skip.
    let driver = TimerDriver::catching_up(1_000);
    let engine = Engine::start(graph, stream, driver, config(0)).unwrap();
    assert!(engine.wait_for_cycles(CYCLES as u64 + 1, PATIENCE));
    let report = engine.stop().unwrap();

    let due: Vec<u64> = due.iter().map(|d| d.load(Ordering::Relaxed)).collect();
    for pair in due.windows(2) {
        assert_eq!(pair[1] - pair[0], stream.period_ns(), "due times {due:?}");
    }
    let cycles = &report.profile.cycles;
    assert!(cycles.iter().all(|c| c.skipped_periods == 0));
    let late = cycles.iter().filter(|c| c.xrun).count();
    assert!(late >= 1, "the slow cycle and those run after it are late");
    assert_no_rt_allocations();
}

#[test]
fn profiler_columns_are_consistent() {
    let mut graph = Graph::new();
    let sine = graph
        .add_node("sine", Box::new(nodes::Sine::new(440.0, 0.5)))
        .unwrap();
    let load = graph
        .add_node("load", Box::new(nodes::Load::new(0.05)))
        .unwrap();
    let out = graph
        .add_node("out", Box::new(nodes::Passthrough::new(1)))
        .unwrap();
    connect(&mut graph, sine, "out", load, "in");
    connect(&mut graph, load, "out", out, "in0");
    let engine = Engine::start(graph, stream(), TimerDriver::new(), config(1)).unwrap();
    assert!(engine.wait_for_cycles(30, PATIENCE));
    assert!(engine.cpu_load() > 0.0);
    let profile = engine.stop().unwrap().profile;

    let mut csv = Vec::new();
    profile.write_cycles_csv(&mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(CYCLES_CSV_HEADER));
    let columns: Vec<&str> = CYCLES_CSV_HEADER.split(',').collect();
    let col = |name: &str| columns.iter().position(|c| *c == name).unwrap();
    let mut previous_start = None;
    let mut previous_xrun = false;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), columns.len());
        let int = |name: &str| fields[col(name)].parse::<u64>().unwrap();
        assert_eq!(int("nodes"), 3);
        assert_eq!(int("nominal_period_ns"), stream().period_ns());
        assert_eq!(int("deadline_ns"), stream().period_ns());
        // The documented rule: late against the scheduled start, or periods
        // lost since an on-time cycle (a preempted driver counts too).
        let late = int("wakeup_latency_ns") + int("driver_end_ns") > int("deadline_ns");
        let lost = int("skipped_periods") > 0 && !previous_xrun;
        assert_eq!(int("xrun") == 1, late || lost, "{line}");
        previous_xrun = int("xrun") == 1;
        let load: f64 = fields[col("dsp_load")].parse().unwrap();
        let expected = int("driver_end_ns") as f64 / int("nominal_period_ns") as f64;
        assert!((load - expected).abs() < 1e-5);
        if let Some(previous) = previous_start {
            assert_eq!(int("period_ns"), int("start_ns") - previous);
        }
        previous_start = Some(int("start_ns"));
        assert!(int("thread_cpu_ns") > 0);
        assert_eq!(
            fields[col("response_ns")],
            "",
            "no response time without packets"
        );
    }

    let mut csv = Vec::new();
    profile.write_nodes_csv(&mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(NODES_CSV_HEADER));
    let columns: Vec<&str> = NODES_CSV_HEADER.split(',').collect();
    let col = |name: &str| columns.iter().position(|c| *c == name).unwrap();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let int = |name: &str| fields[col(name)].parse::<u64>().unwrap();
        let (signalled, awake, finished) =
            (int("signalled_ns"), int("awake_ns"), int("finished_ns"));
        assert!(finished >= awake && awake >= signalled, "{line}");
        assert_eq!(int("latency_ns"), awake - signalled);
        assert_eq!(int("duration_ns"), finished - awake);
        let cycle = profile
            .cycles
            .iter()
            .find(|c| c.cycle == int("cycle"))
            .unwrap();
        assert!(
            finished <= cycle.driver_end_ns,
            "driver end is the last node's finish"
        );
        if fields[col("name")] == "load" {
            // The load node burns 5 % of the period of CPU time.
            assert!(int("cpu_ns") >= stream().period_ns() / 20);
        }
    }

    let mut json = Vec::new();
    profile.write_json(&mut json).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(
        value["cycles"].as_array().unwrap().len(),
        profile.cycles.len()
    );
    assert_eq!(value["nodes"][0]["name"], "sine");
    assert_no_rt_allocations();
}

#[test]
fn timer_driver_runs_at_32_and_4096_frames() {
    for (frames, rate) in [(32, 96_000), (4096, 44_100)] {
        let stream = StreamConfig::new(frames, rate).unwrap();
        let mut graph = Graph::new();
        graph
            .add_node("sine", Box::new(nodes::Sine::new(440.0, 0.5)))
            .unwrap();
        let engine = Engine::start(graph, stream, TimerDriver::new(), config(1)).unwrap();
        assert!(engine.wait_for_cycles(3, PATIENCE), "{frames} frames");
        let profile = engine.stop().unwrap().profile;
        assert!(profile.cycles.len() >= 3);
        assert!(profile
            .cycles
            .iter()
            .all(|c| c.nominal_period_ns == stream.period_ns()));
    }
    assert_no_rt_allocations();
}

#[test]
fn packet_driver_answers_every_package_on_loopback() {
    const K: usize = 16;
    const PACKET: usize = 32;
    const PACKAGES: u8 = 20;
    let packet_config = PacketConfig {
        packets_per_package: K,
        packet_size: PACKET,
        output_size: 8,
        reply_to: None,
        index_at: None,
    };
    let driver = PacketDriver::bind("127.0.0.1:0", packet_config).unwrap();
    let address = driver.local_addr().unwrap();
    let mut graph = Graph::new();
    // Answers with the package's byte sum, so the sender can check the whole
    // package arrived in the cycle.
    let echo = graph
        .add_node(
            "echo",
            FnNode::boxed(vec![], |ctx| {
                let sum: u64 = ctx.package().iter().map(|&b| u64::from(b)).sum();
                if let Some(out) = ctx.packet_out() {
                    out.copy_from_slice(&sum.to_le_bytes());
                }
            }),
        )
        .unwrap();
    graph.set_packet_writer(Some(echo)).unwrap();
    let engine = Engine::start(graph, stream(), driver, config(1)).unwrap();

    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answered = 0;
    for package in 0..PACKAGES {
        for _ in 0..K {
            sender.send_to(&[package; PACKET], address).unwrap();
        }
        let mut reply = [0u8; 16];
        let (len, _) = sender
            .recv_from(&mut reply)
            .expect("an answer for every package");
        assert_eq!(len, 8);
        let sum = u64::from_le_bytes(reply[..8].try_into().unwrap());
        assert_eq!(sum, (K * PACKET) as u64 * u64::from(package));
        answered += 1;
    }
    let report = engine.stop().unwrap();
    assert_eq!(answered, PACKAGES);
    assert_eq!(report.cycles, u64::from(PACKAGES));
    assert!(
        report
            .profile
            .cycles
            .iter()
            .all(|c| c.response_ns.is_some()),
        "Δt recorded"
    );
    assert_no_rt_allocations();
}

#[test]
fn thread_setup_runs_on_every_engine_thread_and_can_refuse() {
    let roles = Arc::new(Mutex::new(Vec::new()));
    let setup_roles = Arc::clone(&roles);
    let counting = EngineConfig {
        thread_setup: Some(Arc::new(move |role| {
            setup_roles.lock().unwrap().push(role);
            Ok(())
        })),
        ..config(3)
    };
    let engine = Engine::start(Graph::new(), stream(), FreewheelDriver, counting).unwrap();
    assert!(engine.wait_for_cycles(1, PATIENCE));
    engine.stop().unwrap();
    let mut roles = roles.lock().unwrap().clone();
    roles.sort_by_key(|r| match r {
        ThreadRole::Driver => 0,
        ThreadRole::Worker(k) => *k,
    });
    assert_eq!(
        roles,
        [
            ThreadRole::Driver,
            ThreadRole::Worker(1),
            ThreadRole::Worker(2),
            ThreadRole::Worker(3)
        ]
    );

    let started = Arc::new(AtomicBool::new(false));
    let refusing = EngineConfig {
        thread_setup: Some(Arc::new(|role| match role {
            ThreadRole::Worker(2) => Err("no reservation for worker 2".into()),
            _ => Ok(()),
        })),
        ..config(2)
    };
    let flag = Arc::clone(&started);
    let mut graph = Graph::new();
    graph
        .add_node(
            "n",
            FnNode::boxed(vec![], move |_| flag.store(true, Ordering::Relaxed)),
        )
        .unwrap();
    let error = Engine::start(graph, stream(), FreewheelDriver, refusing)
        .err()
        .unwrap();
    assert!(matches!(
        error,
        EngineError::ThreadSetup {
            role: ThreadRole::Worker(2),
            ..
        }
    ));
    assert!(error.to_string().contains("no reservation"));
    assert!(!started.load(Ordering::Relaxed), "no cycle ran");
    assert_no_rt_allocations();
}

#[test]
fn a_driver_kept_for_communication_runs_no_node() {
    let mut graph = Graph::new();
    let sine = graph
        .add_node("sine", Box::new(nodes::Sine::new(440.0, 0.5)))
        .unwrap();
    for name in ["a", "b", "c"] {
        let pass = graph
            .add_node(name, Box::new(nodes::Passthrough::new(1)))
            .unwrap();
        connect(&mut graph, sine, "out", pass, "in0");
    }
    let communication_only = EngineConfig {
        driver_runs_nodes: false,
        ..config(2)
    };
    let engine = Engine::start(graph, stream(), FreewheelDriver, communication_only).unwrap();
    assert!(engine.wait_for_cycles(200, PATIENCE));
    let report = engine.stop().unwrap();
    let rows = &report.profile.nodes;
    assert!(rows.len() >= 4 * 200, "every node ran every cycle");
    assert!(
        rows.iter().all(|row| row.thread != 0),
        "the driver thread (0) ran a node"
    );
    assert_no_rt_allocations();

    let nobody = EngineConfig {
        driver_runs_nodes: false,
        ..config(0)
    };
    let error = Engine::start(Graph::new(), stream(), FreewheelDriver, nobody)
        .err()
        .unwrap();
    assert!(matches!(error, EngineError::NoNodeThread));
    assert!(error.to_string().contains("give the engine a worker"));
}
