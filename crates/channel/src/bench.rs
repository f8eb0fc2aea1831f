//! The channel benchmark: how long a message takes to reach another process
//! that sleeps waiting for it, against a same-process rtrb hand-off plus
//! one futex wake-up (the goal of issue 10: p99 across processes at most
//! twice the same-process one). Reported, never judged.
//!
//! It owns the two runs and the receiving side of the cross-process one,
//! which runs in a child process the caller starts (the CLI runs itself
//! again). Both runs send a CLOCK_MONOTONIC stamp every `interval`, so the
//! receiver is asleep when it arrives, and the receiver subtracts it from
//! the time it holds the message. It must never summarise: the samples go
//! to the caller, whose statistics are tessera-measure's.

use crate::error::ChannelError;
use crate::handover;
use crate::{Channel, Consumer};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use tessera_sys::{clock, futex};

/// How long either side waits for the other before calling the run failed.
const PATIENCE: Duration = Duration::from_secs(10);
/// A stamp: CLOCK_MONOTONIC nanoseconds.
const STAMP_LEN: usize = 8;
const STAMP_SLOTS: usize = 64;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Messages per configuration.
    pub messages: usize,
    /// Pause before each message, long enough for the receiver to sleep.
    pub interval: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            messages: 2000,
            interval: Duration::from_micros(500),
        }
    }
}

/// One latency per message, in nanoseconds, per configuration.
#[derive(Debug, Clone)]
pub struct Samples {
    pub cross_process_ns: Vec<f64>,
    pub same_process_ns: Vec<f64>,
}

/// Runs the cross-process configuration, then the same-process one.
/// `receiver` is a command that calls [`serve_receiver`] with the socket
/// name appended as its last argument.
pub fn run(options: &Options, receiver: Command) -> Result<Samples, ChannelError> {
    Ok(Samples {
        cross_process_ns: cross_process(options, receiver)?,
        same_process_ns: same_process(options),
    })
}

/// The receiver's process, killed if the run ends early.
struct ReceiverProcess(Child);

impl ReceiverProcess {
    fn finish(mut self) -> Result<(), ChannelError> {
        let status = self.0.wait()?;
        if status.success() {
            return Ok(());
        }
        Err(ChannelError::Setup(format!(
            "the receiver process failed: {status}"
        )))
    }
}

impl Drop for ReceiverProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn cross_process(options: &Options, mut receiver: Command) -> Result<Vec<f64>, ChannelError> {
    let name = format!("tessera-channel-bench-{}", std::process::id());
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
    let child = ReceiverProcess(receiver.arg(&name).spawn()?);
    let socket = handover::accept_within(&listener, PATIENCE)?;
    let mut stamps =
        Channel::create("bench.stamps", STAMP_LEN, STAMP_SLOTS)?.hand_over_consumer(&socket)?;
    for _ in 0..options.messages {
        std::thread::sleep(options.interval);
        stamps.push_wait(&clock::monotonic_ns().to_ne_bytes(), PATIENCE)?;
    }
    drop(stamps);
    let samples = read_latencies(&mut Consumer::open_from(&socket)?)?;
    child.finish()?;
    Ok(samples)
}

/// The receiving side of the cross-process run: connects to the abstract
/// socket `socket_name`, takes the stamps until the sender closes, then
/// sends the latencies back as bytes.
pub fn serve_receiver(socket_name: &str) -> Result<(), ChannelError> {
    let socket = UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket_name)?)?;
    let mut stamps = Consumer::open_from(&socket)?;
    let mut latencies: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut stamp = [0u8; STAMP_LEN];
    loop {
        match stamps.pop_wait(&mut stamp, PATIENCE) {
            Ok(_) => {
                let ns = clock::monotonic_ns().saturating_sub(u64::from_ne_bytes(stamp));
                latencies.extend_from_slice(&ns.to_ne_bytes());
            }
            Err(ChannelError::Closed) => break,
            Err(e) => return Err(e),
        }
    }
    let mut results = Channel::create("bench.latencies", 4096, 16)?.hand_over_consumer(&socket)?;
    results.write_all_bytes(&latencies, PATIENCE)
}

/// The receiver's latencies, read until it closes the channel.
fn read_latencies(results: &mut Consumer) -> Result<Vec<f64>, ChannelError> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match results.read_bytes_wait(&mut chunk, PATIENCE) {
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(ChannelError::Closed) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|ns| u64::from_ne_bytes(ns.try_into().expect("8 bytes")) as f64)
        .collect())
}

/// The baseline: an rtrb ring between two threads, the sender waking the
/// sleeping receiver with one private futex wake per message.
fn same_process(options: &Options) -> Vec<f64> {
    let (mut sender, mut receiver) = rtrb::RingBuffer::<u64>::new(STAMP_SLOTS);
    // Bumped after every push; the receiver sleeps while it is unchanged.
    let bell = AtomicU32::new(0);
    let done = AtomicBool::new(false);
    let ring_bell = || {
        bell.fetch_add(1, Ordering::Release);
        futex::wake(&bell, 1);
    };
    std::thread::scope(|s| {
        let receiving = s.spawn(|| {
            let mut latencies = Vec::with_capacity(options.messages);
            loop {
                let rung = bell.load(Ordering::Acquire);
                while let Ok(stamp) = receiver.pop() {
                    latencies.push(clock::monotonic_ns().saturating_sub(stamp) as f64);
                }
                if done.load(Ordering::Acquire) && receiver.is_empty() {
                    return latencies;
                }
                futex::wait(&bell, rung, Some(PATIENCE));
            }
        });
        for _ in 0..options.messages {
            std::thread::sleep(options.interval);
            let mut stamp = clock::monotonic_ns();
            while let Err(rtrb::PushError::Full(back)) = sender.push(stamp) {
                stamp = back;
                std::thread::yield_now();
            }
            ring_bell();
        }
        done.store(true, Ordering::Release);
        ring_bell();
        receiving.join().expect("the receiving thread panicked")
    })
}
