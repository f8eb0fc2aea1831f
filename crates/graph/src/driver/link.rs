//! The link driver: cycles started by packages another thread hands over —
//! a network service running in a cell of its own (seed 000 Fig. 5: the
//! network service in Cell B feeds the synthesizer in Cell A) — and the
//! cycle's output handed back to it.
//!
//! [`package_link`] makes the two ends. The service end ([`LinkService`])
//! sends a package with its start time t1 and receives outputs with the t1
//! of the package they answer, so the service can measure Δt = t2 − t1 where
//! the seed did, at the network. The driver end ([`LinkDriver`]) is the
//! engine's [`Driver`].
//!
//! Each direction is an `rtrb` single-producer/single-consumer ring of
//! bytes holding fixed-size records `[t1: u64 LE][payload]`, written and
//! read a whole record at a time (rtrb publishes a committed chunk with
//! release ordering and reads it with acquire, so a record is seen whole or
//! not at all). Wake-ups:
//! - packages: the service bumps `sent` (a futex word) after committing and
//!   wakes; the driver reads `sent` *before* looking at the ring and sleeps
//!   only while it is unchanged, so a package committed after the look
//!   changes the word and the sleep returns at once — no wake-up is lost;
//! - outputs: the driver signals an eventfd after committing; the service
//!   watches it with epoll beside its socket and drains it *before* reading
//!   the ring, so a signal after the read leaves it readable again.
//!
//! This module owns the records and the wake-up protocol. Neither end may
//! allocate, lock or block after [`package_link`], except the driver's futex
//! wait and the service's own epoll wait; a full ring is counted, never
//! waited on.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};
use tessera_sys::clock;
use tessera_sys::event::EventFd;
use tessera_sys::futex;

use super::{CycleStart, Driver, DriverError};

/// How long the driver sleeps before re-checking its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Bytes of the t1 stamp before each record's payload.
const STAMP: usize = 8;

/// Shape of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    pub package_size: usize,
    pub output_size: usize,
    /// Records each direction holds (≥ 1): packages the service may be
    /// ahead of the engine by.
    pub depth: usize,
}

/// What the driver end counts; shared with the service end for reports.
#[derive(Debug, Default)]
struct Counters {
    /// Outputs the service had no room for (it fell `depth` behind).
    outputs_lost: AtomicU64,
}

/// The service's end: sends packages, receives outputs.
pub struct LinkService {
    packages: Producer<u8>,
    outputs: Consumer<u8>,
    sent: Arc<AtomicU32>,
    output_ready: EventFd,
    config: LinkConfig,
    /// Packages the engine had no room for.
    packages_lost: u64,
    counters: Arc<Counters>,
}

/// The engine's end: a [`Driver`].
pub struct LinkDriver {
    packages: Consumer<u8>,
    outputs: Producer<u8>,
    sent: Arc<AtomicU32>,
    output_ready: EventFd,
    config: LinkConfig,
    /// t1 of the package the running cycle answers.
    current_start_ns: u64,
    counters: Arc<Counters>,
}

/// The two ends of a link.
pub fn package_link(config: LinkConfig) -> Result<(LinkService, LinkDriver), DriverError> {
    if config.package_size == 0 || config.depth == 0 {
        return Err(DriverError::Config(
            "a link needs packages of at least one byte and a depth of at least 1",
        ));
    }
    let (package_tx, package_rx) = RingBuffer::new(config.depth * (STAMP + config.package_size));
    let (output_tx, output_rx) = RingBuffer::new(config.depth * (STAMP + config.output_size));
    let output_ready = EventFd::new().map_err(sys_error("creating the link's eventfd"))?;
    let signal = output_ready
        .try_clone()
        .map_err(sys_error("duplicating the link's eventfd"))?;
    let sent = Arc::new(AtomicU32::new(0));
    let counters = Arc::new(Counters::default());
    Ok((
        LinkService {
            packages: package_tx,
            outputs: output_rx,
            sent: Arc::clone(&sent),
            output_ready,
            config,
            packages_lost: 0,
            counters: Arc::clone(&counters),
        },
        LinkDriver {
            packages: package_rx,
            outputs: output_tx,
            sent,
            output_ready: signal,
            config,
            current_start_ns: 0,
            counters,
        },
    ))
}

fn sys_error(context: &'static str) -> impl FnOnce(tessera_sys::Error) -> DriverError {
    move |e| DriverError::Io {
        context,
        source: std::io::Error::other(e.to_string()),
    }
}

/// Writes `[t1][payload]` as one record; false if the ring has no room.
fn push_record(ring: &mut Producer<u8>, start_ns: u64, payload: &[u8]) -> bool {
    let Ok(mut chunk) = ring.write_chunk(STAMP + payload.len()) else {
        return false;
    };
    let (first, second) = chunk.as_mut_slices();
    let stamp = start_ns.to_le_bytes();
    let mut bytes = stamp.iter().chain(payload);
    for slot in first.iter_mut().chain(second.iter_mut()) {
        *slot = *bytes.next().expect("the chunk is the record's size");
    }
    chunk.commit_all();
    true
}

/// Reads one record into `payload`, returning its t1; `None` if none is
/// waiting.
fn pop_record(ring: &mut Consumer<u8>, payload: &mut [u8]) -> Option<u64> {
    let chunk = ring.read_chunk(STAMP + payload.len()).ok()?;
    let (first, second) = chunk.as_slices();
    let mut bytes = first.iter().chain(second);
    let mut stamp = [0u8; STAMP];
    for (slot, byte) in stamp.iter_mut().chain(payload.iter_mut()).zip(&mut bytes) {
        *slot = *byte;
    }
    chunk.commit_all();
    Some(u64::from_le_bytes(stamp))
}

impl LinkService {
    /// Hands a package that started at `start_ns` (t1) to the engine; false
    /// (and counted) when the engine is `depth` packages behind.
    pub fn send_package(&mut self, start_ns: u64, package: &[u8]) -> bool {
        debug_assert_eq!(package.len(), self.config.package_size);
        if !push_record(&mut self.packages, start_ns, package) {
            self.packages_lost += 1;
            return false;
        }
        self.sent.fetch_add(1, Ordering::Release);
        futex::wake(&self.sent, 1);
        true
    }

    /// Readable when outputs are waiting: watch it with epoll, then call
    /// [`LinkService::take_outputs_signal`] and [`LinkService::receive_output`].
    pub fn output_fd(&self) -> BorrowedFd<'_> {
        self.output_ready.as_fd()
    }

    /// Clears the readiness of [`LinkService::output_fd`]; call it before
    /// reading the outputs.
    pub fn take_outputs_signal(&self) {
        self.output_ready.drain();
    }

    /// The next output into `output` (its size is the link's output size),
    /// with the t1 of the package it answers.
    pub fn receive_output(&mut self, output: &mut [u8]) -> Option<u64> {
        debug_assert_eq!(output.len(), self.config.output_size);
        pop_record(&mut self.outputs, output)
    }

    pub fn config(&self) -> LinkConfig {
        self.config
    }

    /// Packages the engine had no room for.
    pub fn packages_lost(&self) -> u64 {
        self.packages_lost
    }

    /// Outputs the service had no room for.
    pub fn outputs_lost(&self) -> u64 {
        self.counters.outputs_lost.load(Ordering::Relaxed)
    }
}

impl Driver for LinkDriver {
    fn packet_sizes(&self) -> (usize, usize) {
        (self.config.package_size, self.config.output_size)
    }

    fn wait_cycle(
        &mut self,
        _period_ns: u64,
        package: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<CycleStart>, DriverError> {
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            let seen = self.sent.load(Ordering::Acquire);
            if let Some(start_ns) = pop_record(&mut self.packages, package) {
                self.current_start_ns = start_ns;
                return Ok(Some(CycleStart::event(start_ns)));
            }
            futex::wait(&self.sent, seen, Some(STOP_POLL));
        }
    }

    fn end_cycle(&mut self, output: &[u8]) -> Result<Option<u64>, DriverError> {
        if !push_record(&mut self.outputs, self.current_start_ns, output) {
            self.counters.outputs_lost.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        self.output_ready.signal();
        Ok(Some(clock::monotonic_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(depth: usize) -> (LinkService, LinkDriver) {
        package_link(LinkConfig {
            package_size: 5,
            output_size: 3,
            depth,
        })
        .unwrap()
    }

    #[test]
    fn a_package_crosses_with_its_start_and_the_output_comes_back_stamped() {
        let (mut service, mut driver) = link(2);
        let stop = AtomicBool::new(false);
        assert!(service.send_package(42, &[1, 2, 3, 4, 5]));
        let mut package = [0u8; 5];
        let start = driver.wait_cycle(0, &mut package, &stop).unwrap().unwrap();
        assert_eq!((start.start_ns, package), (42, [1, 2, 3, 4, 5]));
        assert!(driver.end_cycle(&[7, 8, 9]).unwrap().is_some());
        service.take_outputs_signal();
        let mut output = [0u8; 3];
        assert_eq!(service.receive_output(&mut output), Some(42));
        assert_eq!(output, [7, 8, 9]);
        assert_eq!(service.receive_output(&mut output), None);
    }

    #[test]
    fn records_wrap_around_the_ring_whole() {
        let (mut service, mut driver) = link(2);
        let stop = AtomicBool::new(false);
        let mut package = [0u8; 5];
        for i in 0..10u8 {
            assert!(service.send_package(u64::from(i), &[i; 5]));
            let start = driver.wait_cycle(0, &mut package, &stop).unwrap().unwrap();
            assert_eq!((start.start_ns, package), (u64::from(i), [i; 5]));
        }
    }

    #[test]
    fn a_full_link_counts_lost_packages_and_outputs_instead_of_waiting() {
        let (mut service, mut driver) = link(1);
        assert!(service.send_package(1, &[0; 5]));
        assert!(!service.send_package(2, &[0; 5]));
        assert_eq!(service.packages_lost(), 1);
        assert!(driver.end_cycle(&[0; 3]).unwrap().is_some());
        assert!(driver.end_cycle(&[0; 3]).unwrap().is_none());
        assert_eq!(service.outputs_lost(), 1);
    }

    #[test]
    fn a_waiting_driver_wakes_for_a_package_sent_from_another_thread() {
        let (mut service, mut driver) = link(1);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            service.send_package(9, &[9; 5]);
            service
        });
        let stop = AtomicBool::new(false);
        let mut package = [0u8; 5];
        let start = driver.wait_cycle(0, &mut package, &stop).unwrap().unwrap();
        assert_eq!(start.start_ns, 9);
        sender.join().unwrap();
    }

    #[test]
    fn a_raised_stop_flag_ends_the_wait() {
        let (_service, mut driver) = link(1);
        let stop = AtomicBool::new(true);
        let mut package = [0u8; 5];
        assert!(driver.wait_cycle(0, &mut package, &stop).unwrap().is_none());
    }
}
