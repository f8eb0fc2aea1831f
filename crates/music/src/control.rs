//! OSC control of the running application: a listener thread (not
//! real-time) receives OSC datagrams on a UDP socket, parses them and routes
//! each control to the graph node it concerns through that node's own
//! single-producer/single-consumer ring: a table or range to its pad's
//! object node, migration and width to every object node, the gain to the
//! mixer node. The nodes apply them between blocks.
//!
//! This module owns the socket and the routing. Garbage on the socket is
//! counted and ignored; a node's full ring drops the control and counts it —
//! the listener never waits for the audio threads.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};
use tessera_synth::osc::parse_packet;
use tessera_synth::Control;

/// Controls a node's ring holds between two blocks.
const RING: usize = 64;
/// How long a receive blocks before the stop flag is looked at.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Largest OSC datagram taken (a 128-step table is about 560 bytes).
const DATAGRAM: usize = 4096;

/// The producers of every node's control ring.
pub struct ControlRouter {
    pads: Vec<Producer<Control>>,
    mixer: Producer<Control>,
    dropped: u64,
}

/// The consumers, one per object node and one for the mixer node.
pub struct ControlRings {
    pub pads: Vec<Consumer<Control>>,
    pub mixer: Consumer<Control>,
}

/// Rings for `objects` object nodes and the mixer.
pub fn control_rings(objects: usize) -> (ControlRouter, ControlRings) {
    let (pads, pad_ends): (Vec<_>, Vec<_>) = (0..objects).map(|_| RingBuffer::new(RING)).unzip();
    let (mixer, mixer_end) = RingBuffer::new(RING);
    (
        ControlRouter {
            pads,
            mixer,
            dropped: 0,
        },
        ControlRings {
            pads: pad_ends,
            mixer: mixer_end,
        },
    )
}

impl ControlRouter {
    /// Sends `control` to the nodes it concerns.
    pub fn route(&mut self, control: Control) {
        let ok = match control {
            Control::Gain(_) => self.mixer.push(control).is_ok(),
            Control::Table { pad, .. } | Control::Range { pad, .. } => {
                match self.pads.get_mut(usize::from(pad)) {
                    Some(ring) => ring.push(control).is_ok(),
                    // A pad beyond the objects played: ignored, like the synth does.
                    None => true,
                }
            }
            Control::Migration { .. } | Control::Width { .. } => {
                let mut all = true;
                for ring in &mut self.pads {
                    all &= ring.push(control.clone()).is_ok();
                }
                all
            }
        };
        if !ok {
            self.dropped += 1;
        }
    }

    /// Controls dropped because a node's ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// What the listener saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlReport {
    pub datagrams: u64,
    pub controls: u64,
    /// Datagrams that were not valid OSC for the synthesizer.
    pub refused: u64,
    /// Controls dropped for a full ring.
    pub dropped: u64,
}

/// The running listener.
pub struct ControlListener {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    /// `None` once joined.
    thread: Option<JoinHandle<ControlReport>>,
}

impl ControlListener {
    /// Binds `bind` and starts routing what arrives there.
    pub fn start(bind: SocketAddr, mut router: ControlRouter) -> std::io::Result<ControlListener> {
        let socket = UdpSocket::bind(bind)?;
        socket.set_read_timeout(Some(STOP_POLL))?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let (flag, refusals) = (Arc::clone(&stop), Arc::clone(&refused));
        let thread = std::thread::Builder::new()
            .name("tessera-osc".into())
            .spawn(move || {
                let mut report = ControlReport::default();
                let mut datagram = vec![0u8; DATAGRAM];
                while !flag.load(Ordering::Acquire) {
                    let Ok(len) = socket.recv(&mut datagram) else {
                        continue;
                    };
                    report.datagrams += 1;
                    let mut route = |c: Control| {
                        report.controls += 1;
                        router.route(c);
                    };
                    if parse_packet(&datagram[..len], &mut route).is_err() {
                        refusals.fetch_add(1, Ordering::Relaxed);
                    }
                }
                report.refused = refusals.load(Ordering::Relaxed);
                report.dropped = router.dropped();
                report
            })?;
        Ok(ControlListener {
            addr,
            stop,
            refused,
            thread: Some(thread),
        })
    }

    /// Where OSC senders send.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Datagrams refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) -> ControlReport {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .expect("joined only here")
            .join()
            .unwrap_or_default()
    }
}

/// A listener dropped without [`ControlListener::stop`] still ends its
/// thread.
impl Drop for ControlListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_control_goes_to_the_nodes_it_concerns() {
        let (mut router, mut rings) = control_rings(4);
        router.route(Control::Gain(0.5));
        router.route(Control::Range {
            pad: 2,
            table: 1,
            base_hz: 110.0,
            octaves: 2,
        });
        router.route(Control::Range {
            pad: 9,
            table: 1,
            base_hz: 110.0,
            octaves: 2,
        });
        router.route(Control::Width { max_cents: 50.0 });
        assert_eq!(rings.mixer.pop().unwrap(), Control::Gain(0.5));
        assert!(rings.mixer.pop().is_err());
        let counts: Vec<usize> = rings
            .pads
            .iter_mut()
            .map(|r| std::iter::from_fn(|| r.pop().ok()).count())
            .collect();
        assert_eq!(counts, [1, 1, 2, 1], "range to pad 2 only, width to all");
        assert_eq!(router.dropped(), 0);
    }

    #[test]
    fn osc_datagrams_reach_the_nodes_and_garbage_is_counted() {
        let (router, mut rings) = control_rings(2);
        let listener = ControlListener::start("127.0.0.1:0".parse().unwrap(), router).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut datagram = [0u8; 64];
        let len = Control::Gain(0.25).encode(&mut datagram).unwrap();
        sender
            .send_to(b"not osc at all", listener.local_addr())
            .unwrap();
        sender
            .send_to(&datagram[..len], listener.local_addr())
            .unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        let control = loop {
            if let Ok(c) = rings.mixer.pop() {
                break c;
            }
            assert!(std::time::Instant::now() < give_up, "the gain arrived");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(control, Control::Gain(0.25));
        let report = listener.stop();
        assert_eq!(
            (report.datagrams, report.controls, report.refused),
            (2, 1, 1)
        );
    }

    #[test]
    fn a_full_ring_drops_and_counts() {
        let (mut router, _rings) = control_rings(1);
        for _ in 0..RING + 3 {
            router.route(Control::Gain(1.0));
        }
        assert_eq!(router.dropped(), 3);
    }
}
