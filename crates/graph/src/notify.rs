//! Non-real-time callbacks: graph order changes, xruns, buffer size and
//! sample rate changes, client and port registration, shutdown.
//!
//! The real-time side pushes fixed-size notices into an SPSC queue (`rtrb`)
//! and bumps a futex word; the control thread sends registrations through an
//! ordinary channel. A dedicated notification thread delivers both to the
//! application's [`Callbacks`]. This module owns that thread. The real-time
//! side must never wait for it: when its queue is full, a notice is dropped
//! (and counted) rather than blocking a cycle.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_sys::futex;

use crate::graph::GraphChange;
use crate::node::NodeId;
use crate::port::PortId;
use crate::xrun::XrunReport;
use crate::StreamConfig;

/// Callbacks JACK clients know, except `process` (that is [`crate::Node`]).
/// All run on the engine's notification thread, never on the real-time path,
/// so they may allocate, lock and print.
pub trait Callbacks: Send + 'static {
    /// A new graph (order, connections) is running from `cycle` on.
    fn graph_order_changed(&mut self, _version: u64, _cycle: u64) {}
    fn xrun(&mut self, _report: &XrunReport) {}
    /// The buffer size changed (takes effect at the graph change reported
    /// just before).
    fn buffer_size_changed(&mut self, _frames: u32) {}
    fn sample_rate_changed(&mut self, _sample_rate: u32) {}
    fn client_registration(&mut self, _node: NodeId, _name: &str, _registered: bool) {}
    fn port_registration(&mut self, _port: PortId, _name: &str, _registered: bool) {}
    /// The engine stopped: on request, or because its driver failed. Called
    /// once, last.
    fn shutdown(&mut self, _reason: &str) {}
}

/// Callbacks that ignore everything.
pub struct NoCallbacks;
impl Callbacks for NoCallbacks {}

/// What the real-time side reports. Fixed-size, so pushing never allocates.
// Boxing the large xrun report would allocate on the real-time path; the
// queue's slots are preallocated at their full size instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum RtNotice {
    Xrun(XrunReport),
    GraphSwitched {
        version: u64,
        cycle: u64,
        stream: StreamConfig,
    },
    /// The driver failed; the message is built off the real-time section.
    DriverFailed(String),
}

/// What the control thread reports.
pub(crate) enum ControlNotice {
    Change(GraphChange),
    Shutdown(String),
}

/// Real-time side's handle: never blocks.
pub(crate) struct RtNotifier {
    queue: rtrb::Producer<RtNotice>,
    shared: Arc<NotifyShared>,
}

/// Control side's handle.
pub(crate) struct ControlNotifier {
    channel: mpsc::Sender<ControlNotice>,
    shared: Arc<NotifyShared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct NotifyShared {
    /// Bumped after every push; the notification thread waits on it.
    seq: AtomicU32,
    stop: AtomicBool,
    dropped: AtomicU64,
}

impl NotifyShared {
    fn wake(&self) {
        self.seq.fetch_add(1, Ordering::Release);
        futex::wake(&self.seq, 1);
    }
}

/// How long the notification thread sleeps between checks of its stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Starts the notification thread; `stream` is the configuration the engine
/// starts with (changes are reported relative to it).
pub(crate) fn start(
    callbacks: Box<dyn Callbacks>,
    rt_capacity: usize,
    stream: StreamConfig,
) -> std::io::Result<(RtNotifier, ControlNotifier)> {
    let (rt_tx, rt_rx) = rtrb::RingBuffer::new(rt_capacity);
    let (control_tx, control_rx) = mpsc::channel();
    let shared = Arc::new(NotifyShared::default());
    let mut delivery = Delivery {
        callbacks,
        rt: rt_rx,
        control: control_rx,
        shared: Arc::clone(&shared),
        stream,
        shut_down: false,
    };
    let thread = std::thread::Builder::new()
        .name("tessera-notify".into())
        .spawn(move || delivery.run())?;
    Ok((
        RtNotifier {
            queue: rt_tx,
            shared: Arc::clone(&shared),
        },
        ControlNotifier {
            channel: control_tx,
            shared,
            thread: Some(thread),
        },
    ))
}

impl RtNotifier {
    /// Queues a notice for the notification thread; drops it if the queue is
    /// full. Allocation-free; at most one futex wake.
    pub(crate) fn notify(&mut self, notice: RtNotice) {
        if self.queue.push(notice).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.shared.wake();
    }
}

impl ControlNotifier {
    pub(crate) fn notify(&self, notice: ControlNotice) {
        // The receiver lives as long as the thread, which `stop` joins.
        let _ = self.channel.send(notice);
        self.shared.wake();
    }

    /// Real-time notices dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Delivers what is queued, calls `shutdown(reason)` unless a driver
    /// failure already did, and joins the thread.
    pub(crate) fn stop(&mut self, reason: &str) {
        self.notify(ControlNotice::Shutdown(reason.to_owned()));
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(thread) = self.thread.take() {
            // A panicking callback already reported itself; nothing to add.
            let _ = thread.join();
        }
    }
}

impl Drop for ControlNotifier {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop("engine dropped");
        }
    }
}

struct Delivery {
    callbacks: Box<dyn Callbacks>,
    rt: rtrb::Consumer<RtNotice>,
    control: mpsc::Receiver<ControlNotice>,
    shared: Arc<NotifyShared>,
    stream: StreamConfig,
    shut_down: bool,
}

impl Delivery {
    fn run(&mut self) {
        loop {
            let seq = self.shared.seq.load(Ordering::Acquire);
            let stopping = self.shared.stop.load(Ordering::Acquire);
            self.deliver_control();
            self.deliver_rt();
            if stopping {
                return;
            }
            futex::wait(&self.shared.seq, seq, Some(POLL));
        }
    }

    fn deliver_rt(&mut self) {
        while let Ok(notice) = self.rt.pop() {
            match notice {
                RtNotice::Xrun(report) => self.callbacks.xrun(&report),
                RtNotice::GraphSwitched {
                    version,
                    cycle,
                    stream,
                } => self.graph_switched(version, cycle, stream),
                RtNotice::DriverFailed(error) => self.shutdown(&format!("driver failed: {error}")),
            }
        }
    }

    fn deliver_control(&mut self) {
        while let Ok(notice) = self.control.try_recv() {
            match notice {
                ControlNotice::Change(change) => self.graph_change(change),
                ControlNotice::Shutdown(reason) => {
                    // Real-time notices from the last cycles come first.
                    self.deliver_rt();
                    self.shutdown(&reason);
                }
            }
        }
    }

    fn graph_switched(&mut self, version: u64, cycle: u64, stream: StreamConfig) {
        self.callbacks.graph_order_changed(version, cycle);
        if stream.frames() != self.stream.frames() {
            self.callbacks.buffer_size_changed(stream.frames());
        }
        if stream.sample_rate() != self.stream.sample_rate() {
            self.callbacks.sample_rate_changed(stream.sample_rate());
        }
        self.stream = stream;
    }

    fn graph_change(&mut self, change: GraphChange) {
        match change {
            GraphChange::ClientRegistered { node, name } => {
                self.callbacks.client_registration(node, &name, true)
            }
            GraphChange::ClientUnregistered { node, name } => {
                self.callbacks.client_registration(node, &name, false)
            }
            GraphChange::PortRegistered { port, name } => {
                self.callbacks.port_registration(port, &name, true)
            }
            GraphChange::PortUnregistered { port, name } => {
                self.callbacks.port_registration(port, &name, false)
            }
        }
    }

    fn shutdown(&mut self, reason: &str) {
        if !self.shut_down {
            self.shut_down = true;
            self.callbacks.shutdown(reason);
        }
    }
}
