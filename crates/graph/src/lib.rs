//! tessera's audio graph engine, on JACK's model.
//!
//! Nodes ([`Node`], JACK's clients) have typed ports ([`PortSpec`]): audio
//! ports carry one block of `f32` per cycle, event ports carry timestamped
//! events. Output ports connect to input ports ([`Graph::connect`]); several
//! connections into one input are summed, a single one is read in place. An
//! [`Engine`] runs the graph once per cycle on a driver thread plus N worker
//! threads: each node runs when all its predecessors finished (activation
//! counters), independent branches in parallel. A [`Driver`] starts the
//! cycles: [`TimerDriver`] (periodic, absolute-time wake-ups),
//! [`PacketDriver`] (a complete UDP input package), [`LinkDriver`] (a
//! package handed over by a network service in another cell), [`FreewheelDriver`]
//! (back to back). Graph edits made on the control thread ([`Engine::edit`])
//! are compiled there and switched in between cycles.
//!
//! Every cycle is profiled ([`Profile`]); a cycle that misses its deadline is
//! an xrun, reported with the nodes that were late ([`XrunReport`]) on the
//! notification thread ([`Callbacks`]). Nodes hand data to non-RT threads
//! through [`ring`].
//!
//! ```no_run
//! use tessera_graph::{nodes, Engine, EngineConfig, Graph, StreamConfig, TimerDriver};
//!
//! let mut graph = Graph::new();
//! let sine = graph.add_node("sine", Box::new(nodes::Sine::new(440.0, 0.5)))?;
//! let out = graph.add_node("out", Box::new(nodes::Passthrough::new(1)))?;
//! graph.connect(graph.port(sine, "out")?, graph.port(out, "in0")?)?;
//! let stream = StreamConfig::new(128, 48_000)?;
//! let engine = Engine::start(graph, stream, TimerDriver::new(), EngineConfig::default())?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let report = engine.stop()?;
//! report.profile.write_cycles_csv(std::io::stdout())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Public only to the loom model (`tests/loom.rs`), which drives the real
// activation protocol over loom's atomics.
#[cfg(loom)]
pub mod activation;
#[cfg(not(loom))]
mod activation;
mod cell;
pub mod driver;
mod engine;
mod graph;
mod node;
pub mod nodes;
mod notify;
mod port;
pub mod profiler;
pub mod ring;
mod switch;
mod sync;
mod xrun;

pub use driver::{
    package_link, CycleStart, Driver, DriverError, FreewheelDriver, GridClock, LinkConfig,
    LinkDriver, LinkService, PackageAssembler, PacketConfig, PacketDriver, TimerDriver,
};
pub use engine::{
    Engine, EngineConfig, EngineError, RunReport, SetupError, ThreadRole, ThreadSetup,
};
pub use graph::{Graph, GraphChange, GraphError};
pub use node::{Node, NodeId, NodeName, ProcessContext, NODE_NAME_BYTES};
pub use notify::{Callbacks, NoCallbacks};
pub use port::{
    Event, EventBuffer, EventBufferFull, EventKind, EventTooLong, PortDirection, PortId, PortKind,
    PortSpec, EVENT_BYTES,
};
pub use profiler::{Budget, BudgetProbe, CycleRecord, NodeRecord, Profile};
pub use switch::PublishTimeout;
pub use tessera_policy::stream::{
    StreamConfig, StreamConfigError, MAX_FRAMES, MIN_FRAMES, SAMPLE_RATES,
};
pub use xrun::{LateNode, XrunReport, MAX_LATE_NODES};
