//! PipeWire's own RTP modules beside a [`PipeWireServer`] started here:
//! Debian 12's PipeWire (0.3.65) has `libpipewire-module-rtp-sink`, which
//! sends a stream node's audio as RTP and announces it by SAP itself, and
//! `libpipewire-module-rtp-source`, which listens to SAP and plays every
//! session it hears as a stream node named after the SDP's `s=` line
//! (there is no SAP module of its own). A second `pipewire -c FILE`
//! process loads both as a client of the server. With no session manager
//! nothing gives a stream node its ports or links it, so this module also
//! does that by hand with PipeWire's tools: find a node by name, set its
//! PortConfig, link two nodes channel by channel.
//!
//! It owns that process (stopped by its PID when its handle drops, error
//! or not) and the configuration file written for it (removed then). It
//! must never talk to a PipeWire but the one it is given (every program it
//! runs points at that server's private runtime directory only), signal a
//! process it did not start, or load anything into the server itself.

use std::fs;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::servers::{await_ready, log_to, spawn_on, unique, OwnedChild, PipeWireServer};

/// How long the modules' process may take to exit after SIGTERM.
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// How often the graph is looked at while waiting for it to change.
const POLL: Duration = Duration::from_millis(50);
/// What to install when PipeWire's programs are missing.
const INSTALL: &str = "Debian: apt-get install pipewire pipewire-bin";

#[derive(Debug, thiserror::Error)]
pub enum PipeWireRtpError {
    /// The modules could not be loaded at all: PipeWire is missing, too
    /// old, or the machine's network refuses their sockets.
    #[error(
        "PipeWire's RTP modules did not start: {0} (they are libpipewire-module-rtp-sink and \
         -rtp-source, PipeWire 0.3.60 or later; {INSTALL})"
    )]
    NotStarted(String),
    #[error(
        "PipeWire has no node {name:?} after {waited:?} (its nodes: {nodes}); fix: an \
         rtp-source session's node appears only once its SAP announcement is heard on the \
         modules' SAP group: announce the stream there, on a host with a route for 224.0.0.0/4"
    )]
    NoNode {
        name: String,
        waited: Duration,
        nodes: String,
    },
    #[error(
        "PipeWire node {node} has no {channels} {direction:?} ports {waited:?} after its \
         PortConfig was set; fix: give a format the node's stream can be converted from"
    )]
    NoPorts {
        node: u32,
        direction: Direction,
        channels: u16,
        waited: Duration,
    },
    #[error("`{command}` failed: {message} ({INSTALL})")]
    Tool { command: String, message: String },
}

/// An RTP sample format (PipeWire's name for it is big-endian PCM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    L16,
    L24,
}

impl Sample {
    fn pipewire_format(self) -> &'static str {
        match self {
            Sample::L16 => "S16BE",
            Sample::L24 => "S24BE",
        }
    }
}

/// What the modules send and where they listen.
#[derive(Debug, Clone)]
pub struct RtpSpec {
    /// The sink's session, as its SAP announcement names it (SDP `s=`).
    pub session: String,
    /// The sink's stream node, to link to.
    pub node: String,
    /// The address the sink sends from (the announcement's origin).
    pub source: Ipv4Addr,
    /// The group (or address) and port the sink sends to.
    pub destination: SocketAddrV4,
    pub sample: Sample,
    pub rate: u32,
    pub channels: u16,
    /// The sink's packet time.
    pub ptime_ms: u32,
    /// The SAP group and port: the sink announces there, the source
    /// listens there.
    pub sap: SocketAddrV4,
    /// How far behind the newest packet the source plays a session.
    pub latency_ms: u32,
    /// The modules' process's stdout and stderr.
    pub log: PathBuf,
}

impl RtpSpec {
    /// The configuration of a `pipewire` process that is a client of a
    /// server (protocol-native and client-node, as pw-cli's own), its data
    /// thread real-time if module-rt is there, and loads both modules.
    fn config(&self) -> String {
        let sap = format!("sap.ip = {}  sap.port = {}", self.sap.ip(), self.sap.port());
        format!(
            r#"context.properties = {{ log.level = 2 }}
context.spa-libs = {{
    audio.convert.* = audioconvert/libspa-audioconvert
    support.*       = support/libspa-support
}}
context.modules = [
    {{ name = libpipewire-module-rt  flags = [ ifexists nofail ] }}
    {{ name = libpipewire-module-protocol-native }}
    {{ name = libpipewire-module-client-node }}
    {{ name = libpipewire-module-adapter }}
    {{ name = libpipewire-module-rtp-source
      args = {{ {sap}  sess.latency.msec = {latency} }} }}
    {{ name = libpipewire-module-rtp-sink
      args = {{ {sap}  source.ip = {source}
               destination.ip = {destination}  destination.port = {port}  net.loop = true
               sess.min-ptime = {ptime}  sess.max-ptime = {ptime}  sess.name = {session}
               audio.format = {format}  audio.rate = {rate}  audio.channels = {channels}
               stream.props = {{ node.name = {node} }} }} }}
]
"#,
            latency = self.latency_ms,
            source = self.source,
            destination = self.destination.ip(),
            port = self.destination.port(),
            ptime = self.ptime_ms,
            session = quoted(&self.session),
            format = self.sample.pipewire_format(),
            rate = self.rate,
            channels = self.channels,
            node = quoted(&self.node),
        )
    }
}

/// A string in PipeWire's configuration syntax.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The process that holds PipeWire's RTP modules.
pub struct RtpModules {
    process: OwnedChild,
    config: PathBuf,
}

impl RtpModules {
    /// `pipewire -c <config>` as a client of `server`, started from this
    /// thread (its sockets are in this thread's network namespace); ready
    /// when the sink's stream node is in the server's graph.
    pub fn start(server: &PipeWireServer, spec: &RtpSpec) -> Result<RtpModules, PipeWireRtpError> {
        let not_started = PipeWireRtpError::NotStarted;
        let (out, err) = log_to(&spec.log).map_err(not_started)?;
        let config = std::env::temp_dir().join(format!("{}.conf", unique("tessera-pw-rtp")));
        fs::write(&config, spec.config())
            .map_err(|e| not_started(format!("write {}: {e}", config.display())))?;
        let mut command = server.pipewire_command("pipewire");
        command.arg("-c").arg(&config);
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = spawn_on(&mut command, None, "pipewire").map_err(|e| {
            let _ = fs::remove_file(&config);
            not_started(e)
        })?;
        // From here on, the handle stops the process and removes the file.
        let mut modules = RtpModules {
            process: OwnedChild::new(child, "PipeWire's RTP modules", EXIT_WAIT),
            config,
        };
        let what = "pipewire with the RTP modules";
        await_ready(&mut modules.process, &spec.log, what, || {
            find(server, |n| n.name == spec.node).is_ok_and(|n| n.is_some())
        })
        .map_err(not_started)?;
        Ok(modules)
    }
}

impl Drop for RtpModules {
    fn drop(&mut self) {
        self.process.stop();
        let _ = fs::remove_file(&self.config);
    }
}

/// Which way a node's ports face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Input,
    Output,
}

/// The ports a stream node is to have: one per channel, 32-bit float
/// (PipeWire's "dsp" mode), converted from and to the stream's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub direction: Direction,
    pub rate: u32,
    pub channels: u16,
}

impl Ports {
    /// The PortConfig parameter, in pw-cli's syntax.
    fn param(&self) -> String {
        format!(
            "{{ direction: {:?}, mode: dsp, monitor: false, control: false, format: {{ \
             mediaType: audio, mediaSubtype: raw, format: F32P, rate: {}, channels: {}, \
             position: [ {} ] }} }}",
            self.direction,
            self.rate,
            self.channels,
            positions(self.channels).join(" ")
        )
    }
}

/// The channel positions PipeWire names ports after (`output_FL`, …).
fn positions(channels: u16) -> Vec<String> {
    match channels {
        1 => vec!["MONO".into()],
        2 => vec!["FL".into(), "FR".into()],
        n => (0..n).map(|k| format!("AUX{k}")).collect(),
    }
}

/// A node of the server's graph as pw-dump shows it.
#[derive(Debug)]
struct Node {
    id: u32,
    name: String,
    inputs: u64,
    outputs: u64,
}

impl Node {
    fn ports(&self, direction: Direction) -> u64 {
        match direction {
            Direction::Input => self.inputs,
            Direction::Output => self.outputs,
        }
    }
}

/// Runs PipeWire's program `program` against `server`; its stdout.
fn run(server: &PipeWireServer, program: &str, args: &[&str]) -> Result<String, PipeWireRtpError> {
    let failed = |message: String| PipeWireRtpError::Tool {
        command: [program]
            .iter()
            .chain(args)
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
        message,
    };
    let output = server
        .pipewire_command(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(failed(format!("{} {stderr}", output.status)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The server's nodes now.
fn nodes(server: &PipeWireServer) -> Result<Vec<Node>, PipeWireRtpError> {
    let dump = run(server, "pw-dump", &[])?;
    let objects: Vec<serde_json::Value> =
        serde_json::from_str(&dump).map_err(|e| PipeWireRtpError::Tool {
            command: "pw-dump".into(),
            message: format!("its output is not a JSON array: {e}"),
        })?;
    let node = |object: &serde_json::Value| {
        let info = &object["info"];
        Some(Node {
            id: u32::try_from(object["id"].as_u64()?).ok()?,
            name: info["props"]["node.name"].as_str()?.to_string(),
            inputs: info["n-input-ports"].as_u64().unwrap_or(0),
            outputs: info["n-output-ports"].as_u64().unwrap_or(0),
        })
    };
    Ok(objects
        .iter()
        .filter(|o| o["type"] == "PipeWire:Interface:Node")
        .filter_map(node)
        .collect())
}

/// The first node that `wanted` holds of, if any.
fn find(
    server: &PipeWireServer,
    wanted: impl Fn(&Node) -> bool,
) -> Result<Option<Node>, PipeWireRtpError> {
    Ok(nodes(server)?.into_iter().find(wanted))
}

/// Looks for a node `wanted` holds of until one is there or `within`
/// passes.
fn wait_for(
    server: &PipeWireServer,
    within: Duration,
    wanted: impl Fn(&Node) -> bool,
) -> Result<Option<Node>, PipeWireRtpError> {
    let give_up = Instant::now() + within;
    loop {
        let found = find(server, &wanted)?;
        if found.is_some() || Instant::now() >= give_up {
            return Ok(found);
        }
        std::thread::sleep(POLL);
    }
}

/// The id of the node named `name`, waiting at most `within` for it.
pub fn node_id(
    server: &PipeWireServer,
    name: &str,
    within: Duration,
) -> Result<u32, PipeWireRtpError> {
    match wait_for(server, within, |n| n.name == name)? {
        Some(node) => Ok(node.id),
        None => Err(PipeWireRtpError::NoNode {
            name: name.into(),
            waited: within,
            nodes: nodes(server)?
                .iter()
                .map(|n| format!("{} {:?}", n.id, n.name))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Gives node `node` the `ports` (`pw-cli set-param NODE PortConfig …`,
/// what a session manager does) and waits at most `within` for them.
pub fn set_port_config(
    server: &PipeWireServer,
    node: u32,
    ports: &Ports,
    within: Duration,
) -> Result<(), PipeWireRtpError> {
    let id = node.to_string();
    run(
        server,
        "pw-cli",
        &["set-param", &id, "PortConfig", &ports.param()],
    )?;
    let ready = |n: &Node| n.id == node && n.ports(ports.direction) >= u64::from(ports.channels);
    match wait_for(server, within, ready)? {
        Some(_) => Ok(()),
        None => Err(PipeWireRtpError::NoPorts {
            node,
            direction: ports.direction,
            channels: ports.channels,
            waited: within,
        }),
    }
}

/// Links the output ports of node `from` to the input ports of node `to`,
/// channel by channel (`pw-link "FROM:output_FL" "TO:input_FL"`, …).
pub fn link(
    server: &PipeWireServer,
    from: &str,
    to: &str,
    channels: u16,
) -> Result<(), PipeWireRtpError> {
    for position in positions(channels) {
        let output = format!("{from}:output_{position}");
        let input = format!("{to}:input_{position}");
        run(server, "pw-link", &[&output, &input])?;
    }
    Ok(())
}
