//! Channel semantics across two real processes: order, no loss, full and
//! empty rings, a sleeping reader woken, bulk bytes, admission, and a peer
//! killed with SIGKILL. The test binary runs itself again as the peer
//! (`TESSERA_CHANNEL_PEER` names its role, `TESSERA_CHANNEL_SOCKET` the
//! abstract socket it connects to). Every wait has a timeout, and a peer
//! still running when its test ends is killed.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tessera_channel::handover::{accept_within, admit};
use tessera_channel::{Channel, ChannelError, Consumer, Producer, PEER_CHECK};
use tessera_sys::event::{Epoll, EventFd, Readiness, Trigger};

const ROLE: &str = "TESSERA_CHANNEL_PEER";
const SOCKET: &str = "TESSERA_CHANNEL_SOCKET";
/// How long any wait may take before the test calls it a hang.
const PATIENCE: Duration = Duration::from_secs(20);
/// How soon a dead peer must be noticed (a loaded 2-vCPU machine can
/// stall a process for a good part of a second).
const DEATH_NOTICED_WITHIN: Duration = Duration::from_secs(2);
const MESSAGES: u64 = 20_000;
const BULK_BYTES: usize = 1 << 20;

/// The peer's side; an ordinary test run passes through it at once.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let name = std::env::var(SOCKET).expect("the socket's name");
    let socket = UnixStream::connect_addr(&SocketAddr::from_abstract_name(name).unwrap()).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    match role.as_str() {
        "count" => receive_in_order(&mut Consumer::open_from(&socket).unwrap()),
        "send" => send_in_order(&mut Producer::open_from(&socket).unwrap()),
        "drain-on-cue" => drain_on_cue(&socket),
        "receive-after-sleeping" => receive_after_sleeping(&socket),
        "flood" => flood(&mut Producer::open_from(&socket).unwrap()),
        "hold" => hold(&socket),
        "read-bulk" => read_bulk(&mut Consumer::open_from(&socket).unwrap()),
        "expect-refusal" => expect_refusal(&socket),
        other => panic!("no peer role {other:?}"),
    }
}

/// The peer process and the socket it connected on.
struct Peer {
    child: Child,
    socket: UnixStream,
}

impl Peer {
    /// Starts this test binary again in `role` and accepts its connection.
    fn start(role: &str) -> Peer {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "tessera-channel-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let listener =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["peer_process", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(SOCKET, &name)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let socket = accept_within(&listener, PATIENCE).expect("the peer connects");
        socket.set_read_timeout(Some(PATIENCE)).unwrap();
        Peer { child, socket }
    }

    /// Asserts that the peer exits successfully within [`PATIENCE`].
    fn succeeds(mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the peer failed: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "the peer did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILLs the peer by its PID.
    fn kill(&mut self) -> Instant {
        self.child.kill().unwrap();
        Instant::now()
    }

    /// A new channel whose consumer's end goes to the peer.
    fn feed(&self, name: &str, slot_size: usize, slots: usize) -> Producer {
        let channel = Channel::create(name, slot_size, slots).unwrap();
        channel.hand_over_consumer(&self.socket).unwrap()
    }

    /// A new channel whose producer's end goes to the peer.
    fn drain(&self, name: &str, slot_size: usize, slots: usize) -> Consumer {
        let channel = Channel::create(name, slot_size, slots).unwrap();
        channel.hand_over_producer(&self.socket).unwrap()
    }

    /// Blocks until the peer sends its one-byte cue.
    fn await_cue(&self) {
        (&self.socket).read_exact(&mut [0u8]).unwrap();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Asserts that the producer closed the channel and nothing is left.
fn assert_closed(consumer: &mut Consumer) {
    let rest = consumer.pop_wait(&mut [0u8; 64], PATIENCE);
    assert!(matches!(rest, Err(ChannelError::Closed)), "{rest:?}");
}

/// Tells the other process a step is done.
fn cue(socket: &UnixStream) {
    (&*socket).write_all(b"!").unwrap();
}

/// Message `seq`: the number, then its complement, so that a torn message
/// cannot pass for a whole one.
fn message(seq: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&seq.to_le_bytes());
    bytes[8..].copy_from_slice(&(!seq).to_le_bytes());
    bytes
}

fn send_in_order(producer: &mut Producer) {
    for seq in 0..MESSAGES {
        producer.push_wait(&message(seq), PATIENCE).unwrap();
    }
}

/// Takes [`MESSAGES`] messages, each whole and next in order, then `Closed`.
fn receive_in_order(consumer: &mut Consumer) {
    let mut out = [0u8; 16];
    for seq in 0..MESSAGES {
        assert_eq!(consumer.pop_wait(&mut out, PATIENCE).unwrap(), 16);
        assert_eq!(out, message(seq), "message {seq}");
    }
    assert_closed(consumer);
}

#[test]
fn messages_cross_in_order_without_loss() {
    let peer = Peer::start("count");
    let caller = admit(&peer.socket, |_| Ok(())).unwrap();
    assert_eq!(
        caller.pid as u32,
        peer.child.id(),
        "SO_PEERCRED names the peer"
    );
    let mut producer = peer.feed("order", 16, 8);
    send_in_order(&mut producer);
    drop(producer);
    peer.succeeds();
}

#[test]
fn messages_from_a_peer_producer_cross_in_order() {
    let peer = Peer::start("send");
    let mut consumer = peer.drain("order-back", 16, 8);
    receive_in_order(&mut consumer);
    peer.succeeds();
}

/// The way a service waits on many rings and sockets at once: each ring
/// armed, then one epoll wait on their doorbell.
#[test]
fn a_consumer_waiting_on_its_doorbell_is_woken_and_loses_nothing() {
    let peer = Peer::start("send");
    let doorbell = EventFd::new().unwrap();
    let epoll = Epoll::new().unwrap();
    epoll.add(doorbell.as_fd(), 0, Trigger::Level).unwrap();
    let mut consumer = Channel::with_doorbell("doorbell", 16, 8, &doorbell)
        .unwrap()
        .hand_over_producer(&peer.socket)
        .unwrap();
    let mut out = [0u8; 16];
    let mut ready = [Readiness::EMPTY; 1];
    let (mut seq, mut waits) = (0, 0);
    while seq < MESSAGES {
        match consumer.try_pop(&mut out) {
            Ok(_) => {
                assert_eq!(out, message(seq), "message {seq}");
                seq += 1;
            }
            Err(ChannelError::Empty) => {
                if consumer.arm().unwrap() == tessera_channel::Readiness::NotYet {
                    assert_eq!(epoll.wait(&mut ready, PATIENCE).unwrap(), 1, "woken");
                    doorbell.drain();
                    waits += 1;
                }
                consumer.disarm();
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(waits > 0, "the consumer never had to wait");
    peer.succeeds();
}

/// Sees the ring empty, cues; on the parent's cue (the ring is full), takes
/// five messages in order, then `Closed`.
fn drain_on_cue(socket: &UnixStream) {
    let mut consumer = Consumer::open_from(socket).unwrap();
    let mut out = [0u8; 16];
    assert!(matches!(
        consumer.try_pop(&mut out),
        Err(ChannelError::Empty)
    ));
    cue(socket);
    (&*socket).read_exact(&mut [0u8]).unwrap();
    for seq in 0..5 {
        consumer.pop_wait(&mut out, PATIENCE).unwrap();
        assert_eq!(out, message(seq));
    }
    assert_closed(&mut consumer);
}

#[test]
fn a_full_ring_refuses_until_the_peer_makes_room() {
    let peer = Peer::start("drain-on-cue");
    let mut producer = peer.feed("full", 16, 4);
    peer.await_cue();
    for seq in 0..4 {
        producer.try_push(&message(seq)).unwrap();
    }
    assert!(matches!(
        producer.try_push(&message(4)),
        Err(ChannelError::Full)
    ));
    cue(&peer.socket);
    producer.push_wait(&message(4), PATIENCE).unwrap();
    drop(producer);
    peer.succeeds();
}

/// Cues, then sleeps in `pop_wait` until messages come, then `Closed`.
fn receive_after_sleeping(socket: &UnixStream) {
    let mut consumer = Consumer::open_from(socket).unwrap();
    cue(socket);
    let mut out = [0u8; 16];
    let mut seq = 0;
    loop {
        match consumer.pop_wait(&mut out, PATIENCE) {
            Ok(_) => assert_eq!(out, message(seq)),
            Err(ChannelError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
        seq += 1;
    }
    assert!(seq > 0);
}

#[test]
fn a_sleeping_reader_is_woken_by_a_push() {
    let peer = Peer::start("receive-after-sleeping");
    let mut producer = peer.feed("wake", 16, 4);
    peer.await_cue();
    // A push that lands in the microseconds between two of the reader's
    // sleeps (it looks at the peer every PEER_CHECK) finds it awake: try a
    // few times.
    for seq in 0..5 {
        std::thread::sleep(PEER_CHECK * 20);
        producer.try_push(&message(seq)).unwrap();
        if producer.wake_ups() > 0 {
            break;
        }
    }
    assert_eq!(producer.wake_ups(), 1, "the push found the reader asleep");
    drop(producer);
    peer.succeeds();
}

/// A 64-byte message: `seq`, then 56 bytes that depend on it.
fn patterned(seq: u64) -> [u8; 64] {
    let mut bytes = [0u8; 64];
    bytes[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in bytes[8..].iter_mut().enumerate() {
        *b = (seq as u8) ^ (i as u8);
    }
    bytes
}

/// Pushes numbered messages as fast as the ring takes them, until killed.
fn flood(producer: &mut Producer) {
    for seq in 0.. {
        producer.push_wait(&patterned(seq), PATIENCE).unwrap();
    }
}

#[test]
fn a_producer_killed_mid_stream_is_an_error_and_never_garbage() {
    let mut peer = Peer::start("flood");
    let mut consumer = peer.drain("flood", 64, 8);
    let mut out = [0u8; 64];
    let mut seq = 0;
    let mut killed_at = None;
    let gone = loop {
        if seq == 500 {
            killed_at = Some(peer.kill());
        }
        match consumer.pop_wait(&mut out, PATIENCE) {
            Ok(len) => {
                assert_eq!((len, out), (64, patterned(seq)), "message {seq}");
                seq += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(gone, ChannelError::PeerGone { .. }), "{gone}");
    let noticed = killed_at.expect("killed").elapsed();
    assert!(noticed < DEATH_NOTICED_WITHIN, "noticed after {noticed:?}");
}

/// Opens the consumer's end, cues, and never takes anything.
fn hold(socket: &UnixStream) {
    let _consumer = Consumer::open_from(socket).unwrap();
    cue(socket);
    std::thread::sleep(PATIENCE);
}

#[test]
fn a_consumer_killed_while_the_producer_waits_is_an_error() {
    let mut peer = Peer::start("hold");
    let mut producer = peer.feed("hold", 16, 4);
    peer.await_cue();
    while producer.try_push(&message(0)).is_ok() {}
    let killed_at = peer.kill();
    let gone = producer.push_wait(&message(1), PATIENCE).unwrap_err();
    assert!(matches!(gone, ChannelError::PeerGone { .. }), "{gone}");
    assert!(killed_at.elapsed() < DEATH_NOTICED_WITHIN);
}

fn bulk_byte(at: usize) -> u8 {
    (at * 7 % 251) as u8
}

/// Reads bytes in odd-sized pieces until `Closed`, checking every one.
fn read_bulk(consumer: &mut Consumer) {
    let mut piece = [0u8; 1000];
    let mut at = 0;
    loop {
        match consumer.read_bytes_wait(&mut piece, PATIENCE) {
            Ok(n) => {
                for (i, b) in piece[..n].iter().enumerate() {
                    assert_eq!(*b, bulk_byte(at + i), "byte {}", at + i);
                }
                at += n;
            }
            Err(ChannelError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(at, BULK_BYTES);
}

#[test]
fn bulk_bytes_cross_whole_and_in_order() {
    let peer = Peer::start("read-bulk");
    let mut producer = peer.feed("bulk", 256, 8);
    let bytes: Vec<u8> = (0..BULK_BYTES).map(bulk_byte).collect();
    producer.write_all_bytes(&bytes, PATIENCE).unwrap();
    drop(producer);
    peer.succeeds();
}

fn expect_refusal(socket: &UnixStream) {
    match Consumer::open_from(socket) {
        Err(ChannelError::Refused { reason }) => assert!(reason.contains("not allowed")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a refused caller got a channel"),
    }
}

#[test]
fn a_caller_the_policy_refuses_is_told_why() {
    let peer = Peer::start("expect-refusal");
    let refused = admit(&peer.socket, |caller| {
        Err(format!("uid {} is not allowed", caller.uid))
    });
    assert!(matches!(refused, Err(ChannelError::Refused { .. })));
    peer.succeeds();
}
